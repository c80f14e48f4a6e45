"""The fleet lock: one operator's run at a time (site.yml, rolling_update.yml, rollback.yml, tune.yml).

The lock is a small JSON record on one host (the router host by default, role fleet_lock) naming the run that
holds it: the controller, the user, the ansible-playbook process (its PID and the kernel's start time of that
PID, so that a reused PID is not taken for the holder), the command (program, playbooks, --limit and -i only:
extra vars can carry keys and are never recorded), when it started and a token derived from all of that.

The lock is a lease: the lock host writes ``lease_seconds``, ``renewed`` and ``expires`` (its own clock, epoch
seconds) when a run takes it, and the run renews it every quarter of the lease (callback glm5_fleet_lock), so
a run that died anywhere (an AWX job killed in its container, a lost controller) stops renewing and its lock
expires. A run that finds another controller's lease alive waits for one of two things: a renewal (the
holder lives: refused) or the expiry (the holder is gone: taken over). A run that cannot renew stops itself
before its lease expires, so two runs never both proceed. A record without a lease (written before leases) is
refused until broken, as before.

Pure functions: what the controller's run is (``controller_run``, from a /proc reader), whether a holder's
process is gone (``holder_gone``), the lease (``leased``, ``lease_state``, ``renew``, ``after_wait``), what to
do with the lock (``decide``, ``release_decision``) and the words for the holder (``describe``). The module
``fleet_lock`` applies them under a file lock on the lock host.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

# The record's fields; a record without them is damaged and only a break (take_over '*') replaces it.
FIELDS = ("controller", "user", "pid", "pid_start", "command", "started", "token")
# Options of ansible-playbook whose values say what a run does (and carry no secret); every other option, and
# every extra var, is left out of the recorded command.
KEPT_OPTIONS = {"-l": 1, "--limit": 1, "-i": 1, "--inventory": 1, "-t": 1, "--tags": 1, "-C": 0, "--check": 0}


class LockError(ValueError):
    """A lock record or holder that cannot be used."""


def stat_start(stat_line: str) -> int:
    """The start time (clock ticks after boot, field 22) in a /proc/<pid>/stat line."""
    # The command name (field 2) is in parentheses and may hold spaces and parentheses: split after the last.
    rest = stat_line[stat_line.rindex(")") + 2 :].split()
    return int(rest[19])


def stat_parent(stat_line: str) -> int:
    """The parent PID (field 4) in a /proc/<pid>/stat line."""
    return int(stat_line[stat_line.rindex(")") + 2 :].split()[1])


def main_process(pid: int, read_stat: Callable[[int], str], read_cmdline: Callable[[int], list[str]]) -> int:
    """The ansible-playbook process of a worker ``pid``: Ansible forks its workers from the main process, so
    they share its command line; the main process is the last ancestor with the same one."""
    command = read_cmdline(pid)
    while True:
        parent = stat_parent(read_stat(pid))
        if parent <= 1:
            return pid
        try:
            same = read_cmdline(parent) == command
        except OSError:
            return pid
        if not same:
            return pid
        pid = parent


def recorded_command(argv: list[str]) -> str:
    """The command to record for an ansible-playbook argv: the program's name, the playbooks and the options
    of KEPT_OPTIONS; extra vars (-e) and everything else are dropped, so no key reaches the record."""
    words = list(argv)
    # "python3 /venv/bin/ansible-playbook ..." -> from the program on.
    for i, word in enumerate(words):
        if os.path.basename(word).startswith("ansible"):
            words = words[i:]
            break
    if not words:
        return ""
    kept = [os.path.basename(words[0])]
    i = 1
    while i < len(words):
        word = words[i]
        name, eq, _value = word.partition("=")
        if word.startswith("-"):
            takes = KEPT_OPTIONS.get(name)
            if takes is None:
                i += 1
                continue
            if takes and not eq:
                kept += words[i : i + 2]
                i += 2
                continue
            kept.append(word)
        elif word.endswith((".yml", ".yaml")):
            kept.append(word)
        i += 1
    return shlex.join(kept)


def token_of(controller: str, pid: int, pid_start: int) -> str:
    """The token of a run: the same for every task of one ansible-playbook process, different for the next."""
    return hashlib.sha1(f"{controller}:{pid}:{pid_start}".encode()).hexdigest()[:16]


def controller_run(
    controller: str,
    user: str,
    pid: int,
    read_stat: Callable[[int], str],
    read_cmdline: Callable[[int], list[str]],
    now: datetime,
    job: str = "",
) -> dict[str, object]:
    """The record of the run that ``pid`` (an Ansible worker or the main process) belongs to; ``job`` the AWX
    job id when AWX (or AAP's controller) runs it."""
    main = main_process(pid, read_stat, read_cmdline)
    start = stat_start(read_stat(main))
    return {
        "controller": controller,
        "user": user,
        "pid": main,
        "pid_start": start,
        "command": recorded_command(read_cmdline(main)),
        "started": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "token": token_of(controller, main, start),
        "job": str(job or ""),
    }


def awx_job(variables: Mapping[str, object]) -> str:
    """The AWX job id among a run's variables (AWX and AAP's controller pass awx_job_id and tower_job_id as
    extra vars to every job); "" outside AWX."""
    for name in ("awx_job_id", "tower_job_id"):
        value = variables.get(name)
        if value not in (None, ""):
            return str(value)
    return ""


def leased(record: Mapping[str, object], now: float, lease_seconds: int) -> dict[str, object]:
    """``record`` with a lease that starts now on the lock host's clock."""
    return {
        **record,
        "lease_seconds": int(lease_seconds),
        "renewed": now,
        "expires": now + int(lease_seconds),
    }


def lease_state(record: Mapping[str, object] | None, now: float) -> str:
    """'none' (no record, or one written without a lease), 'live' or 'expired'."""
    if not record or "expires" not in record:
        return "none"
    try:
        return "expired" if now >= float(record["expires"]) else "live"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "none"


def renew(
    current: Mapping[str, object] | None, token: str, now: float
) -> tuple[str, dict[str, object] | None]:
    """('renew', the renewed record) when ``token`` holds the lock; ('lost', None) when it does not any more
    (taken over after its lease expired, broken, or released)."""
    if not current or current.get("token") != token:
        return "lost", None
    seconds = current.get("lease_seconds")
    if not isinstance(seconds, int) or seconds <= 0:
        return "lost", None
    return "renew", leased(current, now, seconds)


def check_record(record: object) -> dict[str, object]:
    """``record`` as a lock record, or LockError naming what is missing."""
    if not isinstance(record, dict):
        raise LockError("the lock record is not a mapping")
    missing = [f for f in FIELDS if f not in record]
    if missing:
        raise LockError(f"the lock record lacks {', '.join(missing)}")
    return record


def holder_gone(holder: dict[str, object], me: dict[str, object], read_stat: Callable[[int], str]) -> bool:
    """True when ``holder`` is a run of this controller whose process has ended (its PID is gone, or now
    belongs to a process started at another time). A holder on another controller is never judged gone."""
    if holder.get("controller") != me.get("controller"):
        return False
    try:
        return stat_start(read_stat(int(holder["pid"]))) != int(holder["pid_start"])
    except (OSError, ValueError, KeyError, IndexError):
        return True


def renew_interval(lease_seconds: int) -> float:
    """How often a live run renews its lease: every quarter of it (at least every second)."""
    return max(1.0, lease_seconds / 4)


def stop_margin(lease_seconds: int) -> float:
    """How long before its lease ends a run that could not renew stops itself (as Ctrl-C): a sixth of the
    lease, at least a second, so that it has stopped when the next run may take the lock over."""
    return max(1.0, lease_seconds / 6)


def renewal_timeout(lease_seconds: int, since_renewed: float) -> float:
    """How long one renewal attempt may take, ``since_renewed`` seconds after the last renewal: until the run
    would have to stop (renewal_verdict's 'expiring'), at least a second. A slow control node or lock host
    (a loaded machine, a cold ssh connection) gets the time the lease leaves, not one fixed interval: from
    the first renewal, more than half of the lease (renew_interval to the stop margin)."""
    return max(1.0, lease_seconds - stop_margin(lease_seconds) - since_renewed)


def renewal_verdict(outcome: str, since_renewed: float, lease_seconds: int) -> str:
    """What the run does after a renewal attempt whose module action was ``outcome`` (renew, lost, or anything
    else for a failed attempt), ``since_renewed`` seconds after its last renewal: 'renewed' (sleep one
    interval), 'retry' (try again soon), 'lost' (another run holds the lock now: stop) or 'expiring' (no
    renewal until the stop margin: stop before the lease ends, so that the run that takes it over never runs
    beside this one)."""
    if outcome == "renew":
        return "renewed"
    if outcome == "lost":
        return "lost"
    return "expiring" if since_renewed >= lease_seconds - stop_margin(lease_seconds) else "retry"


def decide(
    current: dict[str, object] | None, me: dict[str, object], take_over: str, now: float | None = None
) -> str:
    """What to do when ``me`` asks for the lock: 'take' (free), 'keep' (already mine), 'take_over' (a break:
    take_over '*' replaces any holder, take_over <token> only that holder; or the holder's lease expired at
    ``now``), 'wait' (the holder's lease is alive: watch it for a renewal or the expiry, ``after_wait``) or
    'refuse' (a holder without a lease)."""
    if current is None:
        return "take"
    if current.get("token") == me.get("token"):
        return "keep"
    if take_over == "*" or (take_over and take_over == current.get("token")):
        return "take_over"
    state = lease_state(current, now) if now is not None else "none"
    if state == "expired":
        return "take_over"
    if state == "live":
        return "wait"
    return "refuse"


def after_wait(first: Mapping[str, object], current: Mapping[str, object] | None, now: float) -> str:
    """While a run waits on the lease ``first`` it saw: 'take' (released meanwhile), 'refuse' (renewed, or
    another run took it: its holder lives), 'take_over' (expired without a renewal: its holder is gone) or
    'wait'."""
    if current is None:
        return "take"
    if current.get("token") != first.get("token") or current.get("renewed") != first.get("renewed"):
        return "refuse"
    return "take_over" if lease_state(current, now) == "expired" else "wait"


def release_decision(current: dict[str, object] | None, token: str) -> str:
    """'release' when the lock is held by ``token``; 'free' when no one holds it; 'other' when someone else
    does (a run never releases a lock it does not hold)."""
    if current is None:
        return "free"
    return "release" if current.get("token") == token else "other"


def describe(holder: dict[str, object], now: datetime) -> str:
    """The holder in words: who, where (the AWX job when there is one), which process, since when, what it
    runs, and its lease (when it was last renewed and when it expires, on the lock host's clock)."""
    since = str(holder.get("started", "?"))
    try:
        began = datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        minutes = int((now - began).total_seconds() // 60)
        since += f" ({minutes} min ago)"
    except ValueError:
        pass
    job = f"AWX job {holder['job']}, " if holder.get("job") else ""
    words = (
        f"{holder.get('user', '?')}@{holder.get('controller', '?')} "
        f"({job}ansible-playbook PID {holder.get('pid', '?')}), "
        f"since {since}: {holder.get('command') or '?'}"
    )
    if lease_state(holder, now.timestamp()) != "none":
        renewed, expires = float(holder["renewed"]), float(holder["expires"])  # type: ignore[arg-type]
        stamp = datetime.fromtimestamp(expires, UTC).strftime("%H:%M:%SZ")
        ago = max(0, int(now.timestamp() - renewed))
        words += f"; lease of {holder.get('lease_seconds')} s renewed {ago} s ago, expiring at {stamp}"
    return words
