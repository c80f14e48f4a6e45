#!/usr/bin/python
"""Ansible module: check rendered sglang arguments against the installed sglang's own parser."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_args_check
short_description: Prove that the installed sglang accepts the rendered launch arguments
description:
  - Builds the argument parser of the sglang installed in a virtual environment, the way sglang does
    (C(ServerArgs.add_cli_args)), and parses the rendered arguments with it.
  - Run it before the service starts or restarts, so that a flag the installed version rejects fails the play
    and not the service.
  - It only parses; it does not run sglang's later checks, which need the GPUs and the model.
  - Read-only, so it also runs in check mode.
options:
  python:
    description: The Python interpreter of the sglang release (its venv's C(bin/python)).
    type: path
    required: true
  args:
    description: The launch arguments, as rendered (without C(python -m sglang.launch_server)).
    type: list
    elements: str
    required: true
  expected_version:
    description: When set, fail unless the installed sglang is this version.
    type: str
  cache_dir:
    description:
      - When set, a passed check leaves a stamp here, named after the release's interpreter (its resolved
        path and the identity of its venv's C(pyvenv.cfg)), the arguments and the pinned version.
      - The same check with a stamp returns its remembered result without building the parser again, which
        imports sglang and costs seconds of CPU. Releases are never changed in place, so a stamp cannot go
        stale; a rebuilt venv gets a new key.
      - No stamp is written in check mode.
    type: path
attributes:
  check_mode:
    description: It parses the arguments in check mode too; only the stamp in O(cache_dir) is not
      written.
    support: full
  diff_mode:
    description: It changes nothing, so there is no diff.
    support: none
  platform:
    description: Any POSIX host with the sglang release's Python.
    support: full
    platforms: posix
author:
  - glm5-deploy maintainers (@glm5-deploy)
"""

EXAMPLES = r"""
- name: Check the rendered flags with the installed sglang
  glm5.deploy.sglang_args_check:
    python: /opt/sglang/current/venv/bin/python
    args: "{{ sglang_launch_args }}"
    expected_version: "0.5.23"
"""

RETURN = r"""
sglang_version:
  description: The installed sglang version whose parser was used.
  type: str
  returned: when the parser could be built
  sample: 0.5.23
accepted:
  description: Whether the parser accepted the arguments.
  type: bool
  returned: always
message:
  description: What the parser said, in words.
  type: str
  returned: always
values:
  description: The non-default values the parser produced (destination name to value).
  type: dict
  returned: when accepted
cached:
  description: Whether the result came from a stamp in I(cache_dir) (the parser was not built).
  type: bool
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_parser_check import (
    check_cache_key,
    run_parser_checks,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "args": {"type": "list", "elements": "str", "required": True},
            "expected_version": {"type": "str"},
            "cache_dir": {"type": "path"},
        },
        supports_check_mode=True,
    )
    python, args = module.params["python"], module.params["args"]
    stamp = _stamp_path(module, python, args)
    if stamp and os.path.isfile(stamp):
        try:
            with open(stamp, encoding="utf-8") as handle:
                remembered = json.load(handle)
            module.exit_json(changed=False, accepted=True, cached=True, **remembered)
        except (OSError, ValueError):
            pass  # an unreadable stamp: check again

    def runner(cmd: list[str], data: str) -> tuple[int, str, str]:
        return module.run_command(cmd, data=data, binary_data=True)

    try:
        (result,) = run_parser_checks(python, [args], runner)
    except (RuntimeError, OSError, ValueError) as exc:
        module.fail_json(msg=f"cannot check the sglang arguments: {exc}", accepted=False, message=str(exc))
    version = result["sglang_version"]
    expected = module.params["expected_version"]
    if expected and version != expected:
        msg = f"{python} has sglang {version}, not the pinned {expected}; reinstall it with sglang_runtime"
        module.fail_json(msg=msg, accepted=False, message=msg, sglang_version=version)
    if not result["ok"]:
        msg = f"sglang {version} rejects the rendered flags: {result['error']}. Rendered: {' '.join(args)}"
        module.fail_json(msg=msg, accepted=False, message=msg, sglang_version=version)
    outcome = {
        "sglang_version": version,
        "message": f"sglang {version} accepts the {len(args)} rendered arguments",
        "values": result.get("values", {}),
    }
    if stamp and not module.check_mode:
        _write_stamp(stamp, outcome)
    module.exit_json(changed=False, accepted=True, cached=False, **outcome)


def _stamp_path(module: AnsibleModule, python: str, args: list[str]) -> str | None:
    """The stamp of this check in cache_dir, or None without a cache (or a venv to identify)."""
    cache_dir = module.params["cache_dir"]
    # The venv's bin directory, resolved (current -> releases/<name>); not the interpreter itself, which is a
    # symlink to the system's Python.
    real = os.path.join(os.path.realpath(os.path.dirname(python)), os.path.basename(python))
    cfg = os.path.join(os.path.dirname(os.path.dirname(real)), "pyvenv.cfg")
    if not cache_dir or not os.path.isfile(cfg):
        return None
    info = os.stat(cfg)
    key = check_cache_key(real, (info.st_ino, info.st_mtime_ns), args, module.params["expected_version"])
    return os.path.join(cache_dir, key + ".json")


def _write_stamp(stamp: str, outcome: dict) -> None:
    """Write the stamp atomically; a cache that cannot be written only costs the next run a check."""
    try:
        os.makedirs(os.path.dirname(stamp), mode=0o755, exist_ok=True)
        partial = f"{stamp}.{os.getpid()}.tmp"
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump(outcome, handle)
        os.replace(partial, stamp)
    except OSError:
        pass


if __name__ == "__main__":
    main()
