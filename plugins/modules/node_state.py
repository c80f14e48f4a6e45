#!/usr/bin/python
"""Ansible module: compare a role's managed paths, users and groups with the node in one read-only call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_state
short_description: Report how a node's managed paths, users and groups differ from what a role would write
description:
  - One read of everything a role manages, so that a converged node costs one round trip instead of one per
    file, directory or user. The role runs its writing tasks (which report changes, diffs and check mode as
    usual) only when I(drift) is not empty.
  - Content is compared by SHA-1; give the role's items through the C(node_state_expect) filter, which turns
    C(content) into C(sha1) on the controller, so no content reaches the node or a verbose log.
  - Read-only, so it also runs in check mode.
options:
  paths:
    description: Managed paths.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The path.
        type: path
        required: true
      state:
        description: What should be there.
        type: str
        choices: [file, directory, absent]
        default: file
      owner:
        description: Owner's name.
        type: str
      group:
        description: Group's name.
        type: str
      mode:
        description: Octal mode ("0644"); a symbolic mode never matches, so the role's task decides.
        type: raw
      sha1:
        description: SHA-1 of the file's content.
        type: str
  users:
    description: Managed users.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The user's name.
        type: str
        required: true
      group:
        description: Primary group's name.
        type: str
      home:
        description: Home directory.
        type: str
      shell:
        description: Login shell.
        type: str
  groups:
    description: Managed groups' names.
    type: list
    elements: str
    default: []
  units:
    description: Managed systemd units, read with C(systemctl show); a unit that systemd has not reloaded
      since its files changed differs too.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The unit's name.
        type: str
        required: true
      active:
        description: Whether it should be running.
        type: bool
        default: false
      enabled:
        description: Whether it should be enabled.
        type: bool
        default: false
extends_documentation_fragment:
  - glm5.deploy.attributes.read_only
attributes:
  platform:
    description: Any POSIX host.
    support: full
    platforms: posix
author:
  - glm5-deploy maintainers (@glm5-deploy)
"""

EXAMPLES = r"""
- name: Read the state of the service's files
  glm5.deploy.node_state:
    paths: "{{ my_role_files | glm5.deploy.node_state_expect }}"
    users: [{name: sglang, group: sglang, home: /var/lib/sglang, shell: /usr/sbin/nologin}]
    groups: [sglang]
  register: my_role_state

- name: Install the service's files only when the node differs
  ansible.builtin.include_tasks: install.yml
  when: my_role_state.drift | length > 0
"""

RETURN = r"""
drift:
  description: Each difference, in words (empty when the node matches).
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.glm5.deploy.plugins.module_utils.node_state import UNIT_PROPERTIES, drift
from ansible_collections.glm5.deploy.plugins.module_utils.systemd_unit import parse_systemctl_show


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "path": {"type": "path", "required": True},
                    "state": {"type": "str", "choices": ["file", "directory", "absent"], "default": "file"},
                    "owner": {"type": "str"},
                    "group": {"type": "str"},
                    "mode": {"type": "raw"},
                    "sha1": {"type": "str"},
                },
            },
            "users": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "name": {"type": "str", "required": True},
                    "group": {"type": "str"},
                    "home": {"type": "str"},
                    "shell": {"type": "str"},
                },
            },
            "groups": {"type": "list", "elements": "str", "default": []},
            "units": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "name": {"type": "str", "required": True},
                    "active": {"type": "bool", "default": False},
                    "enabled": {"type": "bool", "default": False},
                },
            },
        },
        supports_check_mode=True,
    )

    def read_unit(name: str) -> dict[str, str]:
        argv = ["systemctl", "show", *(f"--property={p}" for p in UNIT_PROPERTIES), "--", name]
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"systemctl show {name} failed: {err.strip() or out.strip()}")
        return parse_systemctl_show(out)

    params = module.params
    found = drift(params["paths"], params["users"], params["groups"], params["units"], read_unit=read_unit)
    module.exit_json(changed=False, drift=found)


if __name__ == "__main__":
    main()
