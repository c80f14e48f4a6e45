#!/usr/bin/python
"""Ansible module: a GPU node's capacity (disk at paths, RAM, /dev/shm, kernel command line), read-only."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_resources
short_description: Read a node's free disk, RAM, /dev/shm and kernel command line, and check them
description:
  - Reports the free space of the filesystem that holds each path (or would hold it, for a path not yet
    created), total RAM, the size of /dev/shm and the kernel command line.
  - With floors given, fails with one message that lists every shortfall and the variable to change.
  - Read-only, so it also runs in check mode.
options:
  paths:
    description: Paths whose filesystem's free space to report; a missing path is measured at its nearest
      existing ancestor.
    type: list
    elements: path
    default: []
  min_free_disk_gib:
    description: Floor of free space (GiB) required at every path in I(paths).
    type: float
  min_ram_gib:
    description: Floor of total RAM (GiB).
    type: float
    default: 0
  min_shm_gib:
    description: Floor of the /dev/shm size (GiB).
    type: float
    default: 0
extends_documentation_fragment:
  - glm5.deploy.attributes.read_only
attributes:
  platform:
    description: Linux hosts (C(/proc/meminfo), C(/proc/cmdline), C(/dev/shm)).
    support: full
    platforms: posix
author:
  - glm5-deploy maintainers (@glm5-deploy)
"""

EXAMPLES = r"""
- name: Check the node's capacity
  glm5.deploy.node_resources:
    paths: [/var/lib/sglang/models]
    min_free_disk_gib: 500
    min_ram_gib: 256
    min_shm_gib: 32
"""

RETURN = r"""
free_bytes:
  description: Free bytes per requested path.
  type: dict
  returned: always
mem_total_bytes:
  description: Total RAM in bytes.
  type: int
  returned: always
shm_total_bytes:
  description: Size of /dev/shm in bytes (0 when it is not mounted).
  type: int
  returned: always
cmdline:
  description: The kernel command line.
  type: str
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.glm5.deploy.plugins.module_utils.node_resources import (
    nearest_existing,
    parse_meminfo,
    shortfalls,
)


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "default": []},
            "min_free_disk_gib": {"type": "float"},
            "min_ram_gib": {"type": "float", "default": 0},
            "min_shm_gib": {"type": "float", "default": 0},
        },
        supports_check_mode=True,
    )
    free = {}
    for path in module.params["paths"]:
        stat = os.statvfs(nearest_existing(path))
        free[path] = stat.f_bavail * stat.f_frsize
    try:
        shm = os.statvfs("/dev/shm")
        shm_bytes = shm.f_blocks * shm.f_frsize
    except OSError:
        shm_bytes = 0
    mem = parse_meminfo(_read("/proc/meminfo"))
    result = {
        "changed": False,
        "free_bytes": free,
        "mem_total_bytes": mem,
        "shm_total_bytes": shm_bytes,
        "cmdline": _read("/proc/cmdline").strip(),
    }
    floor = module.params["min_free_disk_gib"]
    problems = shortfalls(
        free,
        dict.fromkeys(free, floor) if floor is not None else {},
        mem,
        module.params["min_ram_gib"],
        shm_bytes,
        module.params["min_shm_gib"],
    )
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
