"""Cached per-version sglang venvs for the real-parser check, and the generator of sglang_cli/<version>.json.

Layout under $GLM5_CACHE (~/.cache/glm5-deploy)/parser-venvs/ (GLM5_PARSER_VENV_CACHE overrides it):

- the base: the lab engine's venv (lab/bin/build-engine-venv, ``$GLM5_CACHE/engine-venv-<hash>/``), which
  holds torch and the light packages sglang imports while it builds its parser. Every version venv sees it
  through a .pth file, so torch is installed once, for the lab and the parser check alike.
- ``_wheels/``: sglang wheels from ``pip download --no-deps``.
- ``<version>/``: a venv (no pip of its own) holding ``sglang==<version> --no-deps`` plus the lane's
  ``parser_check_packages`` (lanes.yml), which shadow the base where they differ.

Each venv is rebuilt when its ``.complete`` stamp is missing or its recipe changed.

Usage (from the project root, with the project venv):
    .venv/bin/python tests/parser_check/parser_venvs.py ensure [VERSION ...]
    .venv/bin/python tests/parser_check/parser_venvs.py regenerate [VERSION ...]   # writes sglang_cli/*.json
    .venv/bin/python tests/parser_check/parser_venvs.py check VERSION -- --model-path /x --tp-size 8
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "plugins" / "data"
EXTRACT = Path(__file__).resolve().parent / "extract_cli.py"

# pip's install, for every venv here. --no-compile: the parser check imports sglang's argument parser and
# what it needs, a few hundred of the venvs' modules, which Python compiles at their first import.
INSTALL = ["install", "-q", "--no-compile"]
# The base every version venv sees. The lab engine's venv pins torch 2.14.1 + torchvision 0.29.1 +
# triton 3.8.0, the set that imports cleanly on a CPU-only machine: sglang <= 0.5.9 imports torchvision while
# building its parser, and the CPU torch 2.13.0 has no matching torchvision on PyPI (0.28.0 is a CUDA build:
# "operator torchvision::nms does not exist"; docs/lanes.md). It also holds what sglang 0.5.8.post1 / 0.5.9
# import while building the parser (safetensors, partial_json_parser, dill, sentencepiece: found by trying).
# A base of its own was the same torch again: 5.6 GB, and minutes of a fresh machine's make test.
ENGINE_VENV = ROOT / "lab" / "bin" / "build-engine-venv"


def cache_dir() -> Path:
    default = Path(os.environ.get("GLM5_CACHE") or Path.home() / ".cache" / "glm5-deploy") / "parser-venvs"
    return Path(os.environ.get("GLM5_PARSER_VENV_CACHE", default))


def lane_versions() -> dict[str, list[str]]:
    """sglang version -> the parser_check_packages of the lane(s) pinning it, from lanes.yml."""
    doc = yaml.safe_load((DATA / "lanes.yml").read_text(encoding="utf-8"))
    out: dict[str, list[str]] = {}
    for lane in doc["lanes"].values():
        out[str(lane["sglang_version"])] = [str(p) for p in lane.get("parser_check_packages") or []]
    return out


def _stamp(recipe: object) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def _run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def _purelib(python: Path) -> str:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return subprocess.run(
        [str(python), "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()


@contextmanager
def _locked() -> Iterator[None]:
    cache_dir().mkdir(parents=True, exist_ok=True)
    with (cache_dir() / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _fresh(path: Path, stamp: str) -> bool:
    marker = path / ".complete"
    return marker.is_file() and marker.read_text().strip() == stamp


def _base_python() -> Path:
    """The interpreter new venvs are made from: this one's base (Python 3.11, like the lanes need)."""
    return Path(getattr(sys, "_base_executable", sys.executable))


def ensure_base() -> tuple[Path, str]:
    """The base venv, the lab engine's (built if missing, from the lab's wheelhouse); returns (its python, its
    stamp: its directory's name, which carries the hash of its pins)."""
    base = Path(
        subprocess.run([str(ENGINE_VENV)], check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    )
    # The base of its own that the check built until 2026-12-04: 5.6 GB that nothing reads any more.
    shutil.rmtree(cache_dir() / "_base", ignore_errors=True)
    return base / "bin" / "python", base.name


def ensure_version(version: str, extra_packages: list[str] | None = None) -> Path:
    """The python of the parser venv for sglang==version (built if missing or stale)."""
    if extra_packages is None:
        extra_packages = lane_versions().get(version, [])
    with _locked():
        base_python, base_stamp = ensure_base()
        venv = cache_dir() / version
        stamp = _stamp({"version": version, "extra": extra_packages, "base": base_stamp})
        if not _fresh(venv, stamp):
            shutil.rmtree(venv, ignore_errors=True)
            started = time.monotonic()
            wheels = cache_dir() / "_wheels"
            pip = [str(base_python), "-m", "pip"]
            _run([*pip, "download", "-q", "--no-deps", "-d", str(wheels), f"sglang=={version}"])
            wheel = next(
                (
                    w
                    for w in sorted(wheels.glob(f"sglang-{version}-*.whl"))
                    if w.name.split("-")[1] == version
                ),
                None,
            )
            if wheel is None:
                raise RuntimeError(f"pip download gave no wheel for sglang=={version} in {wheels}")
            _run([str(_base_python()), "-m", "venv", "--without-pip", str(venv)])
            python = venv / "bin" / "python"
            Path(_purelib(python), "_glm5_parser_base.pth").write_text(_purelib(base_python) + "\n")
            # --ignore-installed: the base's own sglang (the lab engine's 0.5.23) would otherwise count as
            # installed, and the venv would hold no sglang of its own.
            _run([*pip, "--python", str(python), *INSTALL, "--no-deps", "--ignore-installed", str(wheel)])
            if extra_packages:
                _run([*pip, "--python", str(python), *INSTALL, *extra_packages])
            (venv / ".complete").write_text(stamp + "\n")
            print(f"parser venv {version} built in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return venv / "bin" / "python"


Runner = Callable[[list[str], str], tuple[int, str, str]]


def subprocess_runner(cmd: list[str], data: str) -> tuple[int, str, str]:
    """The runner for module_utils.sglang_parser_check in tests: plain subprocess, stdin from data."""
    proc = subprocess.run(cmd, input=data, capture_output=True, text=True, check=False)
    return proc.returncode, proc.stdout, proc.stderr


EXTRACTED = "GLM5_EXTRACTED_CLI "
# Run first in the parser check's interpreter: extract_cli.py, its JSON on one marker line.
_EXTRACT_PRELUDE = f"""
import contextlib as _contextlib, io as _io, json as _json, runpy as _runpy
_table = _io.StringIO()
with _contextlib.redirect_stdout(_table):
    _runpy.run_path({str(EXTRACT)!r}, run_name="__main__")
print({EXTRACTED!r} + _json.dumps(_json.loads(_table.getvalue())))
"""


def extracting_runner(runner: Runner, tables: dict[str, dict[str, object]]) -> Runner:
    """``runner`` for module_utils.sglang_parser_check that reads the flag table (extract_cli.py) in the same
    interpreter first, into ``tables`` by interpreter path: one sglang import instead of two."""

    def run(cmd: list[str], data: str) -> tuple[int, str, str]:
        python, option, snippet = cmd
        rc, out, err = runner([python, option, _EXTRACT_PRELUDE + snippet], data)
        line = next((ln for ln in out.splitlines() if ln.startswith(EXTRACTED)), None)
        if line is None:
            raise RuntimeError(f"extract_cli.py failed with {python}:\n{err[-3000:]}")
        tables[python] = json.loads(line[len(EXTRACTED) :])
        return rc, out, err

    return run


def extract_cli(python: Path) -> dict[str, object]:
    """The flag table of the sglang installed for python (runs extract_cli.py there)."""
    proc = subprocess.run([str(python), str(EXTRACT)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"extract_cli.py failed with {python}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def regenerate(version: str) -> Path:
    python = ensure_version(version)
    doc = extract_cli(python)
    target = DATA / "sglang_cli" / f"{version}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("ensure", "regenerate"):
        cmd = sub.add_parser(name)
        cmd.add_argument("versions", nargs="*", help="default: every lane's version in lanes.yml")
    check = sub.add_parser("check")
    check.add_argument("version")
    check.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)

    if opts.command == "check":
        sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
        from sglang_parser_check import run_parser_check  # type: ignore[import-not-found]

        args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args
        started = time.monotonic()
        ok, message = run_parser_check(str(ensure_version(opts.version)), args, subprocess_runner)
        print(f"{message} [{time.monotonic() - started:.1f}s]")
        return 0 if ok else 1

    versions = opts.versions or sorted(lane_versions())
    for version in versions:
        if opts.command == "ensure":
            print(ensure_version(version))
        else:
            print(regenerate(version))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
