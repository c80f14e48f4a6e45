"""Release the fleet lock when a run ends before playbooks/unlock.yml (a failed play, Ctrl-C).

A failed play stops ansible-playbook before its last play, and Ctrl-C stops it anywhere, so the release
that unlock.yml does would not run. This callback notes the lock a run took (the result of the module
fleet_lock, role fleet_lock) and its release, and when the run ends with the lock still held (at the play
recap, or at the exit of an interrupted process) it runs the module once more with `ansible`, with the run's
own inventory, connection options and extra vars, to release it. A killed process (SIGKILL) runs nothing: the
next run of the same controller takes that lock over (role fleet_lock), and another controller breaks it with
fleet_lock_break.
"""

from __future__ import annotations

# Ansible's plugin documentation comes before the imports (ansible-test sanity's validate-modules).
# ruff: noqa: E402

DOCUMENTATION = """
name: glm5_fleet_lock
type: aggregate
short_description: Release the fleet lock when a run ends early
description:
  - Releases the fleet lock (role fleet_lock) that a run took when the run fails or is interrupted before
    playbooks/unlock.yml, through the module fleet_lock run with `ansible` and the run's own options.
requirements:
  - enable in ansible.cfg (callbacks_enabled)
"""

import atexit
import json
import subprocess
import sys
from pathlib import Path

from ansible import context
from ansible.plugins.callback import CallbackBase

# The run's command-line options that the release's `ansible` needs to reach the lock host as the run did.
_VALUED = {
    "inventory": "-i",
    "extra_vars": "-e",
    "vault_ids": "--vault-id",
    "vault_password_files": "--vault-password-file",
}
_SINGLE = {
    "private_key_file": "--private-key",
    "remote_user": "-u",
    "connection": "-c",
    "timeout": "-T",
    "become_method": "--become-method",
    "become_user": "--become-user",
}


def release_argv(ansible: str, lock: dict[str, str], args: dict) -> list[str]:
    """The `ansible` command that releases ``lock`` (lock_host, path, token) with the run's options ``args``
    (ansible.context.CLIARGS)."""
    module_args = {
        "path": lock["path"],
        "state": "released",
        "token": lock["token"],
        "lock_host": lock["lock_host"],
    }
    argv = [ansible, lock["lock_host"], "-m", "glm5.deploy.fleet_lock", "-a", json.dumps(module_args), "-o"]
    for key, flag in _VALUED.items():
        for value in args.get(key) or ():
            argv += [flag, str(value)]
    for key, flag in _SINGLE.items():
        if args.get(key):
            argv += [flag, str(args[key])]
    if args.get("become"):
        argv.append("-b")
    return argv


class CallbackModule(CallbackBase):
    """Tracks the fleet lock a run holds and releases it when the run ends early."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "glm5.deploy.glm5_fleet_lock"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._held: dict[str, str] | None = None
        atexit.register(self._release)

    def v2_runner_on_ok(self, result) -> None:
        res = result._result
        if res.get("action") in ("take", "keep", "take_over") and res.get("fleet_lock"):
            self._held = res["fleet_lock"]
        elif res.get("action") in ("release", "free", "other") and "fleet_lock" in res:
            self._held = None

    def v2_playbook_on_stats(self, stats) -> None:
        self._release()

    def _release(self) -> None:
        if not self._held:
            return
        lock, self._held = self._held, None
        ansible = str(Path(sys.argv[0]).with_name("ansible"))
        try:
            done = subprocess.run(
                release_argv(ansible, lock, dict(context.CLIARGS)),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        except (OSError, subprocess.SubprocessError) as err:
            self._display.warning(f"could not release the fleet lock on {lock['lock_host']}: {err}")
            return
        if done.returncode != 0:
            self._display.warning(
                f"could not release the fleet lock on {lock['lock_host']} ({lock['path']}): "
                f"{done.stdout[-500:]} - the next run of this controller takes it over; another controller "
                "needs fleet_lock_break=true"
            )
        else:
            self._display.display(f"Released the fleet lock on {lock['lock_host']} (the run ended early).")
