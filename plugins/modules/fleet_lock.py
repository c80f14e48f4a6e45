#!/usr/bin/python
"""Ansible module: take, keep or release the fleet lock on the lock host (role fleet_lock)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_lock
short_description: Take or release the fleet lock, a JSON record of the run that holds it
description:
  - One operator's run at a time. C(state=held) takes the lock at I(path) for I(holder), keeps it when the
    holder already has it, and reports the current holder (C(refused=true), not a failure) when another run
    has it, unless I(take_over) allows replacing that holder.
  - C(state=released) removes the lock only when I(token) holds it.
  - Reading, deciding and writing happen under an exclusive C(flock) on I(path).guard, so two runs on one lock
    host cannot both take it. The record is written to a temporary file and renamed (root only, 0600).
  - In check mode nothing is written; the result says what would happen.
options:
  path:
    description: The lock record.
    type: path
    required: true
  state:
    description: C(held) to take or keep the lock, C(released) to give it back.
    type: str
    choices: [held, released]
    default: held
  holder:
    description: The run asking for the lock (module_utils.fleet_lock.controller_run), for C(state=held).
    type: dict
  token:
    description: The token of the run that releases the lock, for C(state=released).
    type: str
  take_over:
    description: For C(state=held) when another run holds the lock, C('*') replaces any holder (a break), a
      token
      replaces only the holder with that token (a run of the same controller whose process has ended).
    type: str
    default: ""
  lock_host:
    description: The lock host's inventory name, returned as is (the release on exit needs it).
    type: str
    default: ""
author: glm5-deploy
"""

EXAMPLES = r"""
- name: Take the fleet lock
  fleet_lock:
    path: /var/lib/glm5-deploy/fleet.lock
    holder: "{{ lookup('glm5_controller_run') }}"
  delegate_to: lab-gateway
  run_once: true
"""

RETURN = r"""
action:
  description: take, keep, take_over or refuse (held); release, free or other (released).
  type: str
  returned: always
refused:
  description: Whether another run holds the lock and it was not taken.
  type: bool
  returned: always
holder:
  description: The record of the run that held the lock before this call (null when it was free).
  type: dict
  returned: always
fleet_lock:
  description: The lock this run now holds (lock_host, path, token), for the release on exit; null otherwise.
  type: dict
  returned: always
"""

import fcntl
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_lock import (
    LockError,
    check_record,
    decide,
    release_decision,
)


def _read(path: str) -> dict | None:
    """The record at ``path``; None when there is none; a damaged record as one that names no one."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    try:
        return check_record(json.loads(text))
    except (ValueError, LockError) as err:
        return {"token": "", "damaged": str(err)}


def _write(path: str, record: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".fleet-lock.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["held", "released"], "default": "held"},
            "holder": {"type": "dict"},
            "token": {"type": "str", "no_log": False},
            "take_over": {"type": "str", "default": ""},
            "lock_host": {"type": "str", "default": ""},
        },
        required_if=[("state", "held", ["holder"]), ("state", "released", ["token"])],
        supports_check_mode=True,
    )
    path, state = module.params["path"], module.params["state"]
    directory = os.path.dirname(path)
    if not module.check_mode:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    old_umask = os.umask(0o077)
    guard = None
    try:
        if os.path.isdir(directory):
            guard = open(path + ".guard", "a", encoding="utf-8")  # noqa: SIM115 - held until the end
            fcntl.flock(guard, fcntl.LOCK_EX)
        current = _read(path)
        mine = None
        if state == "held":
            holder = module.params["holder"]
            try:
                check_record(holder)
            except LockError as err:
                module.fail_json(msg=f"fleet_lock: holder: {err}")
            action = decide(current, holder, module.params["take_over"])
            if action in ("take", "take_over") and not module.check_mode:
                _write(path, holder)
            if action != "refuse":
                mine = {"lock_host": module.params["lock_host"], "path": path, "token": holder["token"]}
        else:
            action = release_decision(current, module.params["token"])
            if action == "release" and not module.check_mode:
                os.unlink(path)
    finally:
        os.umask(old_umask)
        if guard is not None:
            guard.close()
    module.exit_json(
        changed=action in ("take", "take_over", "release"),
        action=action,
        refused=action == "refuse",
        holder=current,
        fleet_lock=mine,
    )


if __name__ == "__main__":
    main()
