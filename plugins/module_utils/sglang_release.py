"""Plan a versioned sglang release: its name, its constraints, and the pip arguments that install it.

A release is one venv per pinned sglang lane and package set, kept under ``<root>/releases/<name>/``:

- ``name`` is ``<sglang version>-<hash12>``. The hash covers what ends up in the venv: the package lists, the
  constraint lines and the interpreter's ``major.minor``. It does not cover where the wheels come from (an
  index, a wheelhouse URL or directory) nor the root directory, so a site mirror installs the same release
  as the public index would.
- ``constraints.txt`` holds the lane's pins (plugins/data/lanes.yml), except the lane's overrides,
  which are installed afterwards with ``--no-deps`` so that pip cannot pull them back to the wheel's pin.
- pip installs without byte-compiling (``--no-compile``): compiling all of a release's ~24,000 modules was
  two thirds of its install's CPU, and a server start imports about 7,000 of them. The release is verified
  instead by importing the modules of the server's processes (``import_argv``) as the build's user, which
  writes exactly their byte-code into the release; the service itself cannot write there.
- pip runs in one of two modes: online (``--extra-index-url`` PyTorch's index for the lane's CUDA, so torch
  arrives as the cuXYZ build) or offline (``--no-index --find-links <wheelhouse>``, with ``--trusted-host``
  for a plain-HTTP wheelhouse, as an air-gapped site installs).

Everything here is pure: the role gathers the inputs (lane data, the interpreter's version, the variables)
and these functions decide. Only the standard library is used.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    SglangFlagError,
    compare_versions,
    version_matches,
)

# Bumped when the meaning of the hash changes, so old and new releases never share a name by accident.
HASH_SCHEMA = 1
HASH_LENGTH = 12
# Installed first, with the venv's own pip, before the rest of the set: a newer pip resolves the set (pip
# does not replace itself halfway through a large install), and ansible.builtin.pip, which then runs with
# the venv's interpreter, needs `packaging` there to start.
BOOTSTRAP = ("pip", "setuptools", "wheel", "packaging")
NO_DEPS_MARK = "# no-deps"
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
# What import_argv runs with the release's interpreter: import each module named on its command line, then
# print the version line `sglang version` prints (the lane check reads it, the .verified marker keeps it).
VERSION_LINE = "sglang version: "
IMPORT_SCRIPT = (
    "import importlib, sys\n"
    "for name in sys.argv[1:]:\n"
    "    importlib.import_module(name)\n"
    "import sglang\n"
    f"print({VERSION_LINE!r} + sglang.__version__)\n"
)
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")

_REQ_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"(?P<extras>\[[A-Za-z0-9._,\s-]*\])?\s*"
    r"(?P<spec>(?:(?:===|==|!=|~=|<=|>=|<|>)\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*)"
    r"(?P<marker>;.*)?$"
)
_PYTHON_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")
_CHECK_REQUIRES_RE = re.compile(r"^(?P<who>\S+) \S+ requires (?P<what>[A-Za-z0-9._-]+)")
_CHECK_HAS_RE = re.compile(r"^(?P<who>\S+) \S+ has requirement .*, but you have (?P<what>[A-Za-z0-9._-]+) ")
_CHECK_PLATFORM_RE = re.compile(r"^(?P<who>\S+) \S+ is not supported on this platform")


class SglangReleaseError(SglangFlagError):
    """A release cannot be planned from these inputs; the message names the variable and the fix."""


# --------------------------------------------------------------------------------------------------------
# Requirements
# --------------------------------------------------------------------------------------------------------


def canonical_name(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): lower case, runs of -_. as one dash."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def parse_requirement(line: str) -> tuple[str, str, str, str]:
    """'Name[extra] == 1.0 ; marker' -> (name, extras, spec, marker), whitespace removed from each."""
    text = str(line).strip()
    match = _REQ_RE.match(text)
    if not text or not match:
        raise SglangReleaseError(
            f"cannot read package requirement {line!r}: use 'name==version' (PEP 508, no URLs or options)"
        )
    extras = re.sub(r"\s+", "", match.group("extras") or "")
    spec = re.sub(r"\s+", "", match.group("spec") or "").rstrip(",")
    marker = (match.group("marker") or "").strip()
    return match.group("name"), extras, spec, marker


def normalize_requirement(line: str) -> str:
    """One spelling per requirement: canonical name, extras and spec without spaces, marker kept."""
    name, extras, spec, marker = parse_requirement(line)
    marker = f" {marker}" if marker else ""
    return f"{canonical_name(name)}{extras}{spec}{marker}"


def requirement_name(line: str) -> str:
    """The canonical distribution name of a requirement line."""
    return canonical_name(parse_requirement(line)[0])


def read_requirements(text: str) -> tuple[list[str], list[str]]:
    """A requirements file -> (packages, no-deps packages).

    Comments and blank lines are skipped; a line ending in ``# no-deps`` goes to the second list (the lab's
    requirements-cpu file marks sglang so). pip options (``-r``, ``--hash``, ...) are refused: the role
    passes its own.
    """
    packages: list[str] = []
    no_deps: list[str] = []
    for number, raw in enumerate(str(text).splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        target = no_deps if line.endswith(NO_DEPS_MARK) else packages
        body = line.split("#", 1)[0].strip() if "#" in line else line
        if body.startswith("-"):
            raise SglangReleaseError(f"requirements line {number} ({raw.strip()!r}) is a pip option")
        parse_requirement(body)
        target.append(body)
    return packages, no_deps


# --------------------------------------------------------------------------------------------------------
# Lane data -> constraints, overrides
# --------------------------------------------------------------------------------------------------------


def override_packages(lane: Mapping[str, Any]) -> list[str]:
    """The lane's overrides as 'name==pin': installed --no-deps last, and left out of the constraints."""
    pins: Mapping[str, Any] = lane.get("pins") or {}
    by_name = {canonical_name(parse_requirement(name)[0]): (name, value) for name, value in pins.items()}
    out: list[str] = []
    for name in sorted(lane.get("overrides") or {}):
        key = canonical_name(name)
        if key not in by_name:
            raise SglangReleaseError(f"lane override {name!r} has no pin in the lane's 'pins'")
        pinned_name, version = by_name[key]
        out.append(f"{parse_requirement(pinned_name)[0]}=={version}")
    return out


def _lane_constraint_lines(lane: Mapping[str, Any]) -> list[str]:
    """The lane's pins as 'name==version', sorted, overrides left out, extras dropped."""
    pins: Mapping[str, Any] = lane.get("pins") or {}
    overridden = {canonical_name(name) for name in lane.get("overrides") or {}}
    lines: list[str] = []
    for raw_name in sorted(pins, key=lambda n: canonical_name(parse_requirement(n)[0])):
        name = parse_requirement(raw_name)[0]
        if canonical_name(name) not in overridden:
            lines.append(f"{name}=={pins[raw_name]}")
    return lines


def _extra_constraint_lines(lane_lines: Sequence[str], extra: Sequence[str]) -> list[str]:
    """Site constraint lines, each with a version and none constraining a package twice."""
    seen = {requirement_name(line): "the lane's pins" for line in lane_lines}
    lines: list[str] = []
    for item in extra:
        name, _extras, spec, marker = parse_requirement(item)
        if not spec:
            raise SglangReleaseError(
                f"sglang_runtime_extra_constraints entry {item!r} has no version: write e.g. '{name}==1.2.3'"
            )
        if canonical_name(name) in seen:
            raise SglangReleaseError(
                f"sglang_runtime_extra_constraints entry {item!r} constrains {name}, already set by "
                f"{seen[canonical_name(name)]}; remove one"
            )
        seen[canonical_name(name)] = "sglang_runtime_extra_constraints"
        lines.append(f"{name}{spec}{' ' + marker if marker else ''}")
    return lines


def constraint_lines(lane: Mapping[str, Any], extra: Sequence[str] = ()) -> list[str]:
    """The requirement lines of the release's constraints file: the lane's pins without overrides, then extra.

    Extras are dropped (pip refuses them in constraints: ``flashinfer_python[cu13]`` constrains
    ``flashinfer_python``).
    """
    lane_lines = _lane_constraint_lines(lane)
    return [*lane_lines, *_extra_constraint_lines(lane_lines, extra)]


def constraints_text(lane_name: str, lane: Mapping[str, Any], extra: Sequence[str] = ()) -> str:
    """The constraints.txt written into a release: a header naming its sources, then constraint_lines."""
    lines = [
        f"# Constraints of sglang lane {lane_name} (sglang {lane.get('sglang_version')}).",
        "# Written by glm5-deploy (role sglang_runtime) from plugins/data/lanes.yml.",
        f"# Pins: {' '.join(str(lane.get('pins_source') or 'lanes.yml').split())}",
    ]
    overrides = override_packages(lane)
    if overrides:
        lines.append(f"# Installed afterwards with --no-deps (lane overrides): {', '.join(overrides)}")
    lane_lines = _lane_constraint_lines(lane)
    lines += lane_lines
    site = _extra_constraint_lines(lane_lines, extra)
    if site:
        lines += ["# Site constraints (sglang_runtime_extra_constraints)", *site]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------------
# Python
# --------------------------------------------------------------------------------------------------------


def python_abi(version: str) -> str:
    """'3.11.2' -> '3.11': what a venv depends on (a micro update keeps its wheels valid)."""
    match = _PYTHON_RE.match(str(version).strip())
    if not match:
        raise SglangReleaseError(f"cannot read Python version {version!r}: expected X.Y[.Z]")
    return f"{match.group(1)}.{match.group(2)}"


def python_problem(python_version: str, lane_name: str, lane: Mapping[str, Any], interpreter: str) -> str:
    """'' when python_version satisfies the lane's 'python' range, else a message naming the fix."""
    spec = lane.get("python")
    full = str(python_version).strip()
    python_abi(full)
    if version_matches(full, spec):
        return ""
    return (
        f"{interpreter} is Python {full}, but sglang lane {lane_name} (sglang {lane.get('sglang_version')}) "
        f"needs Python {spec}. Point sglang_runtime_python at a Python {spec} interpreter on this host "
        "(install one first), or choose another sglang_lane."
    )


# --------------------------------------------------------------------------------------------------------
# Naming
# --------------------------------------------------------------------------------------------------------


def release_hash(
    packages: Iterable[str], no_deps_packages: Iterable[str], constraints: Iterable[str], python_version: str
) -> str:
    """The first 12 hex digits of sha256 over the normalized inputs; order and spelling do not matter."""
    document = {
        "schema": HASH_SCHEMA,
        "packages": sorted({normalize_requirement(p) for p in packages}),
        "no_deps": sorted({normalize_requirement(p) for p in no_deps_packages}),
        "constraints": sorted({normalize_requirement(c) for c in constraints}),
        "python": python_abi(python_version),
    }
    blob = json.dumps(document, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:HASH_LENGTH]


def release_name(sglang_version: str, digest: str) -> str:
    """'<version>-<hash12>', the release's directory name."""
    if not re.fullmatch(f"[0-9a-f]{{{HASH_LENGTH}}}", digest):
        raise SglangReleaseError(f"release hash {digest!r} is not {HASH_LENGTH} lower-case hex digits")
    return f"{sglang_version}-{digest}"


def _sglang_pin(
    packages: Sequence[str], no_deps_packages: Sequence[str], version: str, lane_name: str
) -> None:
    """Insist that the package lists install exactly the lane's sglang."""
    pins = [p for p in [*packages, *no_deps_packages] if requirement_name(p) == "sglang"]
    if not pins:
        raise SglangReleaseError(
            f"neither sglang_runtime_packages nor sglang_runtime_no_deps_packages installs sglang: add "
            f"'sglang=={version}' (lane {lane_name})"
        )
    for pin in pins:
        spec = parse_requirement(pin)[2]
        exact = re.fullmatch(r"===?([^,]+)", spec)
        if not exact or compare_versions(exact.group(1), version) != 0:
            raise SglangReleaseError(
                f"the package lists install {pin!r}, but lane {lane_name} is sglang {version}: pin "
                f"'sglang=={version}', or choose the lane with sglang_lane"
            )


# --------------------------------------------------------------------------------------------------------
# pip
# --------------------------------------------------------------------------------------------------------


def pip_source_args(wheelhouse: str | None, torch_index: str | None) -> list[str]:
    """Where pip finds wheels: offline from a wheelhouse (URL or directory), else the index plus torch's."""
    location = (wheelhouse or "").strip()
    if location:
        args = ["--no-index", "--find-links", location]
        parts = urlsplit(location)
        if parts.scheme == "http" and parts.hostname and parts.hostname not in LOCAL_HOSTS:
            args += ["--trusted-host", parts.hostname]
        elif parts.scheme not in ("", "http", "https", "file"):
            raise SglangReleaseError(
                f"sglang_runtime_wheelhouse {location!r}: use an http(s):// or file:// URL or a directory"
            )
        return args
    index = (torch_index or "").strip()
    if not index:
        return []
    if urlsplit(index).scheme not in ("http", "https"):
        raise SglangReleaseError(f"sglang_runtime_torch_index {index!r} is not an http(s) URL")
    return ["--extra-index-url", index]


def pip_source_environment(wheelhouse: str | None) -> dict[str, str]:
    """pip_source_args as pip's environment variables (PIP_NO_INDEX, PIP_FIND_LINKS, PIP_TRUSTED_HOST).

    ansible.builtin.pip reports every run with extra_args as changed in check mode; options given through
    the environment keep its check mode exact.
    """
    args = pip_source_args(wheelhouse, None)
    env: dict[str, str] = {}
    for option, value in zip(args, [*args[1:], ""], strict=False):
        if option == "--no-index":
            env["PIP_NO_INDEX"] = "1"
        elif option == "--find-links":
            env["PIP_FIND_LINKS"] = value
        elif option == "--trusted-host":
            env["PIP_TRUSTED_HOST"] = value
    return env


def pip_environment(offline: bool) -> dict[str, str]:
    """The environment pip runs in. Offline, the host's pip configuration cannot add indexes or links."""
    env = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_PROGRESS_BAR": "off"}
    if offline:
        env["PIP_CONFIG_FILE"] = "/dev/null"
    return env


def pip_check_problems(output: str, no_deps_packages: Iterable[str]) -> list[str]:
    """The lines of `pip check` output that are real problems.

    A package installed with --no-deps may lack its own dependencies (sglang on the CPU lacks the GPU
    stack), and a lane override may break the pin of the package that wanted another version (transformers
    over sglang 0.5.9's pin): those lines are expected. Anything else is a problem.
    """
    allowed = {requirement_name(p) for p in no_deps_packages}
    problems: list[str] = []
    for raw in str(output).splitlines():
        line = raw.strip()
        if not line or line == "No broken requirements found.":
            continue
        match = _CHECK_REQUIRES_RE.match(line) or _CHECK_PLATFORM_RE.match(line)
        if match and canonical_name(match.group("who")) in allowed:
            continue
        match = _CHECK_HAS_RE.match(line)
        if match and (
            canonical_name(match.group("who")) in allowed or canonical_name(match.group("what")) in allowed
        ):
            continue
        problems.append(line)
    return problems


# --------------------------------------------------------------------------------------------------------
# Pruning
# --------------------------------------------------------------------------------------------------------


def releases_to_prune(releases: Mapping[str, float], keep: int, protected: Iterable[str]) -> list[str]:
    """The releases to delete, oldest first.

    releases maps a release name to its modification time. protected names (current, previous, the release
    just selected) are always kept and count towards keep; the newest of the rest fill the remaining places.
    """
    if int(keep) < 1:
        raise SglangReleaseError(f"sglang_runtime_keep_releases is {keep}; keep at least 1")
    kept = {name for name in protected if name in releases}
    others = sorted((n for n in releases if n not in kept), key=lambda n: (releases[n], n), reverse=True)
    room = max(int(keep) - len(kept), 0)
    return sorted(others[room:], key=lambda n: (releases[n], n))


# --------------------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------------------


def plan_release(
    lane_name: str,
    lane: Mapping[str, Any],
    *,
    python_version: str,
    interpreter: str,
    root: str,
    packages: Sequence[str],
    no_deps_packages: Sequence[str] = (),
    extra_constraints: Sequence[str] = (),
    wheelhouse: str | None = None,
    torch_index: str | None = None,
    import_modules: Sequence[str] = (),
) -> dict[str, Any]:
    """Everything the role needs to build, verify and name one release.

    Raises SglangReleaseError for inconsistent inputs (sglang pin not the lane's, a package in both lists,
    unreadable requirements, a module name that is not a dotted Python name). Host problems (the
    interpreter's version, a lane that is not deployable) come back in ``problems``, so the role can fail
    with them in an assert.
    """
    version = str(lane.get("sglang_version") or "")
    if not version:
        raise SglangReleaseError(f"lane {lane_name!r} has no sglang_version in plugins/data/lanes.yml")
    packages = [str(p).strip() for p in packages]
    no_deps = [str(p).strip() for p in no_deps_packages]
    for override in override_packages(lane):
        if requirement_name(override) not in {requirement_name(p) for p in no_deps}:
            no_deps.append(override)
    in_both = sorted({requirement_name(p) for p in packages} & {requirement_name(p) for p in no_deps})
    if in_both:
        raise SglangReleaseError(
            f"{', '.join(in_both)} listed both for the resolver and for --no-deps (a lane override or "
            "sglang_runtime_no_deps_packages): keep each package in one list"
        )
    _sglang_pin(packages, no_deps, version, lane_name)
    constraints = constraint_lines(lane, extra_constraints)
    digest = release_hash(packages, no_deps, constraints, python_version)
    name = release_name(version, digest)
    base = str(root).rstrip("/") or "/"
    directory = f"{base}/releases/{name}"
    venv = f"{directory}/venv"
    constraints_path = f"{directory}/constraints.txt"
    source = pip_source_args(wheelhouse, torch_index)
    offline = bool((wheelhouse or "").strip())
    modules = [str(m).strip() for m in import_modules]
    for module in modules:
        if not _MODULE_RE.match(module):
            raise SglangReleaseError(
                f"sglang_runtime_import_modules: {module!r} is not a dotted Python module name"
            )
    common = [*source, "--no-cache-dir", "--constraint", constraints_path]
    # The bootstrap keeps pip's byte-code: this venv's pip runs three more times (install, --no-deps, check).
    bootstrap_argv = [f"{venv}/bin/python", "-m", "pip", "install", *common]
    install = [*common, "--no-compile"]
    bootstrap = [p for p in packages if requirement_name(p) in BOOTSTRAP]
    if "packaging" not in {requirement_name(p) for p in [*packages, *no_deps]}:
        bootstrap.append("packaging")
    problems = []
    if not lane.get("deployable", False):
        why = " ".join(str(lane.get("description", "")).split())
        problems.append(f"sglang lane {lane_name} is not deployable ({why}); choose another sglang_lane")
    python_message = python_problem(python_version, lane_name, lane, interpreter)
    if python_message:
        problems.append(python_message)
    return {
        "lane": lane_name,
        "version": version,
        "hash": digest,
        "name": name,
        "dir": directory,
        "venv": venv,
        "python": f"{venv}/bin/python",
        "python_version": str(python_version).strip(),
        "python_abi": python_abi(python_version),
        "constraints_path": constraints_path,
        "constraints": constraints_text(lane_name, lane, extra_constraints),
        "bootstrap": bootstrap,
        "packages": [p for p in packages if p not in bootstrap],
        "no_deps_packages": no_deps,
        "pip_args": shlex.join(install),
        "pip_args_no_deps": shlex.join([*install, "--no-deps"]),
        "import_argv": [f"{venv}/bin/python", "-c", IMPORT_SCRIPT, *modules],
        "version_line": f"{VERSION_LINE}{version}",
        "bootstrap_argv": [*bootstrap_argv, *bootstrap],
        "pip_environment": pip_environment(offline),
        "offline": offline,
        "problems": problems,
        "manifest": {
            "name": name,
            "lane": lane_name,
            "sglang_version": version,
            "python": python_abi(python_version),
            "packages": [normalize_requirement(p) for p in packages],
            "no_deps_packages": [normalize_requirement(p) for p in no_deps],
            "constraints": constraints,
            "source": " ".join(source) if source else "pip's configured index",
        },
    }
