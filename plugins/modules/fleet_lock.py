#!/usr/bin/python
"""Ansible module: take, keep or release the fleet lock on the lock host (role fleet_lock)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_lock
short_description: Take, renew or release the fleet lock, a leased JSON record of the run that holds it
description:
  - One operator's run at a time. O(state=held) takes the lock at O(path) for O(holder), keeps it when the
    holder already has it, and reports the current holder (RV(refused=true), not a failure) when another run
    has it, unless O(take_over) allows replacing that holder.
  - The lock is a lease of O(lease_seconds) on the lock host's clock. A holder whose lease expired is taken
    over. While another run's lease is alive the result is RV(action=wait); called again with O(wait_for) set
    to that holder, the module watches the record until the holder renews it (RV(action=refuse)) or it
    expires (RV(action=take_over)).
  - O(state=renewed) extends the lease of O(token) (RV(action=renew)), or reports RV(action=lost) when that
    run no longer holds the lock.
  - O(state=released) removes the lock only when O(token) holds it.
  - Reading, deciding and writing happen under an exclusive C(flock) on O(path).guard, so two runs on one lock
    host cannot both take it. The record is written to a temporary file and renamed (root only, 0600).
options:
  path:
    description: The lock record.
    type: path
    required: true
  state:
    description: V(held) to take or keep the lock, V(renewed) to extend its lease, V(released) to give it
      back.
    type: str
    choices: [held, renewed, released]
    default: held
  holder:
    description: The run asking for the lock (module_utils.fleet_lock.controller_run), for O(state=held).
    type: dict
  token:
    description: The token of the run that renews or releases the lock (O(state=renewed), O(state=released)).
    type: str
  take_over:
    description:
      - For O(state=held) when another run holds the lock, V(*) replaces any holder (a break), a token
        replaces only the holder with that token (a run of the same controller whose process has ended).
    type: str
    default: ""
  lease_seconds:
    description:
      - The lease written with the record (O(state=held)); 0 writes a record without a lease, which only a
        break or the same controller's check replaces.
    type: int
    default: 0
  wait_for:
    description:
      - For O(state=held), the holder record an earlier call returned with RV(action=wait). The module watches
        the lock until that holder renews it or gives it up (refuse or take) or its lease expires (take_over).
    type: dict
  lock_host:
    description: The lock host's inventory name, returned as is (the release on exit needs it).
    type: str
    default: ""
attributes:
  check_mode:
    description: In check mode nothing is written; the result says what would happen.
    support: full
  diff_mode:
    description: The lock is run bookkeeping; no diff is returned.
    support: none
  platform:
    description: Any POSIX host with C(flock).
    support: full
    platforms: posix
author:
  - glm5-deploy maintainers (@glm5-deploy)
"""

EXAMPLES = r"""
- name: Take the fleet lock with a 2-minute lease
  glm5.deploy.fleet_lock:
    path: /var/lib/glm5-deploy/fleet.lock
    holder: "{{ lookup('glm5.deploy.glm5_controller_run') }}"
    lease_seconds: 120
    lock_host: gateway01
  delegate_to: gateway01
  run_once: true
  register: lock

- name: Renew the lease
  glm5.deploy.fleet_lock:
    path: /var/lib/glm5-deploy/fleet.lock
    state: renewed
    token: "{{ lock.fleet_lock.token }}"
  delegate_to: gateway01
  run_once: true
"""

RETURN = r"""
action:
  description:
    - V(take), V(keep), V(take_over), V(wait) or V(refuse) (held); V(renew) or V(lost) (renewed); V(release),
      V(free) or V(other) (released).
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
  description:
    - The lock this run now holds (lock_host, path, token, lease_seconds), for the renewals and the release on
      exit; null otherwise.
  type: dict
  returned: always
waited:
  description: Seconds spent watching another run's lease (O(wait_for)).
  type: float
  returned: always
"""

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Iterator

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_lock import (
    LockError,
    after_wait,
    check_record,
    decide,
    leased,
    release_decision,
    renew,
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


@contextlib.contextmanager
def _guarded(path: str, directory: str) -> Iterator[dict | None]:
    """The record at ``path``, read under an exclusive flock on path.guard held until the block ends (none in
    check mode before the directory exists), with a private umask for what the block writes."""
    old_umask = os.umask(0o077)
    guard = None
    try:
        if os.path.isdir(directory):
            guard = open(path + ".guard", "a", encoding="utf-8")  # noqa: SIM115 - held until the end
            fcntl.flock(guard, fcntl.LOCK_EX)
        yield _read(path)
    finally:
        os.umask(old_umask)
        if guard is not None:
            guard.close()


def _write(path: str, record: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".fleet-lock.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(record, handle, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)


def _decide_held(module: AnsibleModule, current: dict | None, now: float) -> str:
    """The action for state=held: take, keep, take_over, wait or refuse; after a wait, what it ended in."""
    holder, first = module.params["holder"], module.params["wait_for"]
    if first is not None:
        return after_wait(first, current, now)
    return decide(current, holder, module.params["take_over"], now)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["held", "renewed", "released"], "default": "held"},
            "holder": {"type": "dict"},
            "token": {"type": "str", "no_log": False},
            "take_over": {"type": "str", "default": ""},
            "lease_seconds": {"type": "int", "default": 0},
            "wait_for": {"type": "dict"},
            "lock_host": {"type": "str", "default": ""},
        },
        required_if=[
            ("state", "held", ["holder"]),
            ("state", "renewed", ["token"]),
            ("state", "released", ["token"]),
        ],
        supports_check_mode=True,
    )
    path, state = module.params["path"], module.params["state"]
    lease = module.params["lease_seconds"]
    if state == "held":
        try:
            check_record(module.params["holder"])
        except LockError as err:
            module.fail_json(msg=f"fleet_lock: holder: {err}")
    directory = os.path.dirname(path)
    if not module.check_mode:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    began = time.time()
    while True:
        with _guarded(path, directory) as current:
            now = time.time()
            mine = None
            if state == "held":
                holder = module.params["holder"]
                action = _decide_held(module, current, now)
                if action in ("take", "take_over") and not module.check_mode:
                    _write(path, leased(holder, now, lease) if lease > 0 else holder)
                # In check mode nothing was taken: nothing to renew or release.
                if action in ("take", "keep", "take_over") and not module.check_mode:
                    mine = {
                        "lock_host": module.params["lock_host"],
                        "path": path,
                        "token": holder["token"],
                        "lease_seconds": lease,
                    }
            elif state == "renewed":
                action, renewed = renew(current, module.params["token"], now)
                if renewed is not None and not module.check_mode:
                    _write(path, renewed)
            else:
                action = release_decision(current, module.params["token"])
                if action == "release" and not module.check_mode:
                    os.unlink(path)
        # Watching another run's lease: no lock held between looks; at most until that lease expires.
        if action != "wait" or module.params["wait_for"] is None:
            break
        time.sleep(1.0)
    module.exit_json(
        changed=action in ("take", "take_over", "release"),
        action=action,
        refused=action in ("refuse", "wait"),
        holder=current,
        fleet_lock=mine,
        waited=round(time.time() - began, 1),
    )


if __name__ == "__main__":
    main()
