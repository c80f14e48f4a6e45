"""Lookup: the record of this ansible-playbook run on the controller, for the fleet lock (role fleet_lock)."""

from __future__ import annotations

# Ansible's plugin documentation comes before the imports (ansible-test sanity's validate-modules).
# ruff: noqa: E402

DOCUMENTATION = """
name: glm5_controller_run
short_description: The run that asks for the fleet lock (controller, user, ansible-playbook PID, command)
description:
  - Returns one mapping for this ansible-playbook process on the controller, as module_utils.fleet_lock's
    controller_run builds it - controller host name, user, the main process's PID and start time, the command
    (program, playbooks, --limit, -i, --tags, --check; never extra vars), the time now (UTC), a token
    that is the same for every task of the run, and the AWX job id when AWX or AAP's controller runs it
    (its awx_job_id or tower_job_id extra var).
"""

RETURN = """
_raw:
  description: One mapping (controller, user, pid, pid_start, command, started, token, job).
  type: list
  elements: dict
"""

import getpass
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from ansible.plugins.lookup import LookupBase
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_lock import awx_job, controller_run


def _stat(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text()


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").rstrip("\0").split("\0")


class LookupModule(LookupBase):
    """``lookup('glm5_controller_run')``."""

    def run(self, terms, variables=None, **kwargs):
        return [
            controller_run(
                socket.gethostname(),
                getpass.getuser(),
                os.getpid(),
                _stat,
                _cmdline,
                datetime.now(UTC),
                awx_job(variables or {}),
            )
        ]
