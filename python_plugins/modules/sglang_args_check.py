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
author: glm5-deploy
"""

EXAMPLES = r"""
- name: Check the rendered flags with the installed sglang
  sglang_args_check:
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
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_parser_check import run_parser_checks


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "args": {"type": "list", "elements": "str", "required": True},
            "expected_version": {"type": "str"},
        },
        supports_check_mode=True,
    )
    python, args = module.params["python"], module.params["args"]

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
    module.exit_json(
        changed=False,
        accepted=True,
        sglang_version=version,
        message=f"sglang {version} accepts the {len(args)} rendered arguments",
        values=result.get("values", {}),
    )


if __name__ == "__main__":
    main()
