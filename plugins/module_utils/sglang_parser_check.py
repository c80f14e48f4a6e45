"""Check rendered sglang arguments against the real parser of an installed sglang.

``SNIPPET`` is stdlib-only Python run by an interpreter that has sglang installed (a venv on a target host,
or a cached parser venv in CI). It builds the parser the way sglang's prepare_server_args does
(``argparse.ArgumentParser()`` then ``ServerArgs.add_cli_args(parser)``) and calls ``parse_args`` on each
argument list. It stops there: ``ServerArgs.from_cli_args`` / ``__post_init__`` are not run, because they
inspect GPUs, the model and the network. So this proves flag names, switch/value shape, argparse ``choices``
and ``type`` conversions, and custom argparse actions - not sglang's later cross-checks (see known_bad.yml
for the ones we know).

The runner is injected: ``runner(cmd, stdin_text) -> (rc, stdout, stderr)``. An Ansible module passes
``lambda cmd, data: module.run_command(cmd, data=data)``; pytest passes a subprocess wrapper.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

Runner = Callable[[list[str], str], tuple[int, str, str]]

MARKER = "GLM5_SGLANG_PARSER_CHECK "

SNIPPET = r"""
import argparse, json, sys

MARKER = "GLM5_SGLANG_PARSER_CHECK "


class _ParseError(Exception):
    pass


class _CheckingParser(argparse.ArgumentParser):
    def error(self, message):
        raise _ParseError(message)

    def exit(self, status=0, message=None):
        raise _ParseError(message or ("exit %s" % status))


def _plain(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def main():
    request = json.loads(sys.stdin.read())
    try:
        from importlib import metadata
        version = metadata.version("sglang")
        from sglang.srt.server_args import ServerArgs
        parser = _CheckingParser()
        ServerArgs.add_cli_args(parser)
    except Exception as exc:
        print(MARKER + json.dumps({"fatal": "%s: %s" % (type(exc).__name__, exc)}))
        return
    defaults = {a.dest: a.default for a in parser._actions}
    results = []
    for argv in request["argvs"]:
        try:
            namespace = parser.parse_args(list(argv))
        except _ParseError as exc:
            results.append({"ok": False, "error": str(exc)})
            continue
        except Exception as exc:
            results.append({"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)})
            continue
        changed = {k: _plain(v) for k, v in sorted(vars(namespace).items()) if defaults.get(k, None) != v}
        results.append({"ok": True, "error": None, "values": changed})
    print(MARKER + json.dumps({"sglang_version": version, "results": results}))


main()
"""


def run_parser_checks(python: str, argvs: Sequence[Sequence[str]], runner: Runner) -> list[dict[str, Any]]:
    """Parse every argument list in one interpreter run.

    Each result is {ok, error, values (non-default parsed values, when ok), sglang_version}.

    Raises RuntimeError when the check itself cannot run (no sglang, a crash, no answer).
    """
    cmd = [python, "-c", SNIPPET]
    rc, out, err = runner(cmd, json.dumps({"argvs": [list(map(str, argv)) for argv in argvs]}))
    line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        tail = "\n".join((err or out).strip().splitlines()[-15:])
        raise RuntimeError(f"sglang parser check with {python} gave no answer (rc={rc}): {tail}")
    answer = json.loads(line[len(MARKER) :])
    if "fatal" in answer:
        raise RuntimeError(f"sglang parser check with {python} could not build the parser: {answer['fatal']}")
    results: list[dict[str, Any]] = answer["results"]
    for result in results:
        result["sglang_version"] = answer["sglang_version"]
    return results


def run_parser_check(python: str, args: Sequence[str], runner: Runner) -> tuple[bool, str]:
    """(ok, message) for one argument list; a check that cannot run is (False, why)."""
    try:
        (result,) = run_parser_checks(python, [args], runner)
    except RuntimeError as exc:
        return False, str(exc)
    version = result["sglang_version"]
    if result["ok"]:
        return True, f"sglang {version} accepts: {' '.join(args)}"
    return False, f"sglang {version} rejects the rendered flags: {result['error']} (args: {' '.join(args)})"


# --------------------------------------------------------------------------------------------------------
# Remembering a passed check (sglang_args_check's cache_dir)
# --------------------------------------------------------------------------------------------------------


def check_cache_key(
    python_realpath: str, venv_identity: Sequence[int], args: Sequence[str], expected_version: str | None
) -> str:
    """The name of the stamp that remembers that this release accepted these arguments.

    A release's venv is never changed in place (sglang_runtime builds a new one under a new name), so the
    interpreter's path (its bin directory resolved) and the identity of its ``pyvenv.cfg`` (inode and mtime:
    a rebuilt venv gets a new one) name the parser. With the exact arguments and the pinned version, a stamp
    proves that the same check passed before, and the parser (which imports sglang: seconds of CPU per node)
    need not be built again.
    """
    material = json.dumps(
        [python_realpath, [int(v) for v in venv_identity], list(args), expected_version or ""], sort_keys=True
    )
    return hashlib.sha256(material.encode()).hexdigest()
