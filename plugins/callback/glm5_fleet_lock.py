"""Renew the fleet lock's lease while the run lives; release the lock when a run ends before
playbooks/unlock.yml (a failed play, Ctrl-C).

This callback notes the lock a run took (the result of the module fleet_lock, role fleet_lock). While the run
holds it, a small renewer process (this file, run as a script) renews the lease every quarter of it with
`ansible -m glm5.deploy.fleet_lock -a state=renewed`, with the run's own inventory, connection options and
extra vars; it ends with the run. When the lock was taken over (the lease had expired) or cannot be renewed
in time, the renewer interrupts the run (SIGINT, as Ctrl-C) before the lease ends, so two runs never proceed
together. A failed play stops ansible-playbook before its last play, and Ctrl-C stops it anywhere, so the
release that unlock.yml does would not run: when the run ends with the lock still held (at the play recap, or
at the exit of an interrupted process) the callback releases it the same way. A killed process (SIGKILL) runs
nothing and renews nothing: the next run of the same controller takes that lock over at once, any other run
when its lease expires (role fleet_lock).
"""

from __future__ import annotations

# Ansible's plugin documentation comes before the imports (ansible-test sanity's validate-modules).
# ruff: noqa: E402

DOCUMENTATION = """
name: glm5_fleet_lock
type: aggregate
short_description: Renew the fleet lock's lease while the run lives, release it when the run ends early
description:
  - Renews the lease of the fleet lock (role fleet_lock) that a run took, every quarter of the lease, from a
    renewer process that ends with the run and interrupts it when the lease cannot be kept.
  - Releases the lock when the run fails or is interrupted before playbooks/unlock.yml, through the module
    fleet_lock run with `ansible` and the run's own options.
requirements:
  - enable in ansible.cfg (callbacks_enabled)
"""

import atexit
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ansible import context
from ansible.plugins.callback import CallbackBase

try:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_lock import (
        renew_interval,
        renewal_verdict,
    )
except ImportError:  # run as the renewer script: the collection is on the path the callback passes
    renew_interval = renewal_verdict = None  # type: ignore[assignment]

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


def module_argv(ansible: str, lock: dict, module_args: dict, args: dict) -> list[str]:
    """The `ansible` command that runs the module fleet_lock with ``module_args`` on ``lock``'s host, with the
    run's options ``args`` (ansible.context.CLIARGS)."""
    argv = [ansible, lock["lock_host"], "-m", "glm5.deploy.fleet_lock", "-a", json.dumps(module_args)]
    for key, flag in _VALUED.items():
        for value in args.get(key) or ():
            argv += [flag, str(value)]
    for key, flag in _SINGLE.items():
        if args.get(key):
            argv += [flag, str(args[key])]
    if args.get("become"):
        argv.append("-b")
    return argv


def release_argv(ansible: str, lock: dict, args: dict) -> list[str]:
    """The `ansible` command that releases ``lock`` (lock_host, path, token) with the run's ``args``."""
    module_args = {
        "path": lock["path"],
        "state": "released",
        "token": lock["token"],
        "lock_host": lock["lock_host"],
    }
    return module_argv(ansible, lock, module_args, args)


def renew_argv(ansible: str, lock: dict, args: dict) -> list[str]:
    """The `ansible` command that renews ``lock``'s lease."""
    return module_argv(
        ansible, lock, {"path": lock["path"], "state": "renewed", "token": lock["token"]}, args
    )


def ansible_env(**extra: str) -> dict[str, str]:
    """The environment of the `ansible` calls: the run's, with ad-hoc's own stdout callback (minimal: ``host |
    SUCCESS => {...}``) in JSON without colour, whatever the run's configuration and environment set for
    playbooks (a YAML result format; ansible-runner and AWX set a stdout callback of their own, and AWX and
    molecule force colour, whose escapes the JSON would carry)."""
    return {
        **os.environ,
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "0",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        **extra,
    }


def module_action(output: str) -> str:
    """The module's action in `ansible` output (``host | SUCCESS => {...}``, the JSON on one line or many);
    'failed' without one."""
    _head, sep, tail = output.partition("=> ")
    if not sep:
        return "failed"
    try:
        result, _end = json.JSONDecoder().raw_decode(tail.lstrip())
        return str(result.get("action"))
    except (ValueError, AttributeError):
        return "failed"


def attempt_failure(err: OSError | subprocess.SubprocessError) -> str:
    """Why a renewal attempt raised, in words the run may print: never the command line, whose extra vars
    (``-e key=value``) can carry keys."""
    if isinstance(err, subprocess.TimeoutExpired):
        return f"failed: no answer within {err.timeout:.0f} s"
    return f"failed: {type(err).__name__}: {getattr(err, 'strerror', None) or 'no detail'}"


def renewer_messages(said: str, returncode: int | None) -> list[str]:
    """What the run shows of its renewer's standard error once the renewer ended: its own lines (why it
    stopped the run), or, when it ended some other way than by the callback's SIGTERM, its last lines."""
    own = [line for line in said.splitlines() if line.startswith("[glm5_fleet_lock]")]
    if own or returncode in (None, 0, -signal.SIGTERM):
        return own
    tail = " | ".join(said.strip().splitlines()[-8:]) or "no output"
    return [f"[glm5_fleet_lock] ERROR: the fleet lock's renewer ended with exit code {returncode}: {tail}"]


def renew_while_alive(argv: list[str], lease_seconds: int, parent: int) -> str:
    """The renewer: renew the lease every quarter of it while ``parent`` (the ansible-playbook process) lives;
    interrupt it (SIGINT) when the lock is lost or no renewal came through before the stop margin. A renewal
    counts from when its attempt began (the lock host wrote it later). Returns why it stopped."""
    interval = renew_interval(lease_seconds)
    renewed = time.monotonic()
    wait, first = interval, ""
    while True:
        time.sleep(wait)
        if os.getppid() != parent:  # the run ended (its orphan never signals a reused PID)
            return "ended"
        began = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=renewal_timeout(lease_seconds, began - renewed),
                env=ansible_env(),
                check=False,
            )
            action = module_action(done.stdout)
            said = " ".join((done.stdout.strip() or done.stderr.strip()).split())[-300:]
        except (OSError, subprocess.SubprocessError) as err:
            action = said = attempt_failure(err)
        verdict = renewal_verdict(action, time.monotonic() - renewed, lease_seconds)
        if verdict == "renewed":
            renewed, wait, first = began, max(0.0, interval - (time.monotonic() - began)), ""
            continue
        first = first or said
        if verdict == "retry":
            wait = min(5.0, interval / 4)
            continue
        why = (
            "another run holds it now (this run's lease had expired)"
            if verdict == "lost"
            else f"its lease could not be renewed for {int(time.monotonic() - renewed)} s (the first failed "
            f"attempt: {first})"
        )
        if os.getppid() == parent:
            print(
                f"[glm5_fleet_lock] ERROR: the fleet lock on {argv[1]}: {why}. Stopping this run (as Ctrl-C) "
                "so that two runs never change the fleet together; run it again when the lock is free.",
                file=sys.stderr,
                flush=True,
            )
            os.kill(parent, signal.SIGINT)
        return verdict


class CallbackModule(CallbackBase):
    """Tracks the fleet lock a run holds and releases it when the run ends early."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "glm5.deploy.glm5_fleet_lock"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._held: dict | None = None
        self._renewer: subprocess.Popen | None = None
        atexit.register(self._release)

    def v2_runner_on_ok(self, result) -> None:
        res = result._result
        if res.get("action") in ("take", "keep", "take_over") and res.get("fleet_lock"):
            self._held = res["fleet_lock"]
            self._start_renewer(self._held)
        elif res.get("action") in ("release", "free", "other") and "fleet_lock" in res:
            self._stop_renewer()
            self._held = None

    def v2_playbook_on_stats(self, stats) -> None:
        self._release()

    def _start_renewer(self, lock: dict) -> None:
        """One renewer per run, for a lock with a lease, in a session of its own: a run stopped with its
        process group (Ctrl-Z, a debugger) is alive and keeps its lock; the renewer ends with the run (it
        checks that its parent lives before each renewal) or when the callback stops it. A frozen controller
        freezes both: its lease expires, and the next run takes the lock over."""
        if self._renewer is not None or int(lock.get("lease_seconds") or 0) <= 0:
            return
        if renew_interval is None:  # the collection's module_utils are not importable here: no renewals
            self._display.warning(
                "glm5_fleet_lock cannot import glm5.deploy's module_utils: the fleet lock's lease is not "
                "renewed, and another run may take the lock over when it expires"
            )
            return
        ansible = str(Path(sys.argv[0]).with_name("ansible"))
        job = {
            "argv": renew_argv(ansible, lock, dict(context.CLIARGS)),
            "lease_seconds": int(lock["lease_seconds"]),
            "parent": os.getpid(),
            # <path>/ansible_collections/glm5/deploy/plugins/module_utils/fleet_lock.py: <path> holds the
            # collection, as Ansible's collection loader found it (this callback may be loaded by file path).
            "collections": str(Path(sys.modules[renew_interval.__module__].__file__).parents[5]),
        }
        # Its standard error is a pipe of this callback's, shown when the renewer ends (_stop_renewer), never
        # the run's own: a renewer given the run's stderr when that is a pipe (ansible-runner, AWX, `| tee`)
        # died at its start, before any renewal, and said nothing (seen in the lab).
        self._renewer = subprocess.Popen(
            [sys.executable, __file__, json.dumps(job)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            # ssh masters of its own: the run's ControlPersist masters belong to the run's process group, and
            # a run stopped with it would leave each renewal waiting on a stopped master.
            env=ansible_env(ANSIBLE_SSH_CONTROL_PATH_DIR=str(Path.home() / ".ansible" / "cp-glm5-renewer")),
        )

    def _stop_renewer(self) -> None:
        """End the renewer if it runs, and show what it said: why it stopped the run, or how it died."""
        if self._renewer is None:
            return
        renewer, self._renewer = self._renewer, None
        if renewer.poll() is None:
            renewer.terminate()
        try:
            _out, said = renewer.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            renewer.kill()
            _out, said = renewer.communicate()
        for line in renewer_messages(said or "", renewer.returncode):
            self._display.display(line, stderr=True)

    def _release(self) -> None:
        self._stop_renewer()
        if not self._held:
            return
        lock, self._held = self._held, None
        ansible = str(Path(sys.argv[0]).with_name("ansible"))
        try:
            done = subprocess.run(
                release_argv(ansible, lock, dict(context.CLIARGS)),
                env=ansible_env(),
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


if __name__ == "__main__":
    # The renewer (CallbackModule._start_renewer): the job's argv, lease and parent as one JSON argument.
    JOB = json.loads(sys.argv[1])
    sys.path.insert(0, JOB["collections"])
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_lock import (
        renew_interval,
        renewal_timeout,
        renewal_verdict,
    )

    def _stop(*_signal: object) -> None:
        raise SystemExit(0)  # as sys.exit(0): the callback's release ends the renewer with SIGTERM

    signal.signal(signal.SIGTERM, _stop)
    renew_while_alive(JOB["argv"], JOB["lease_seconds"], JOB["parent"])
