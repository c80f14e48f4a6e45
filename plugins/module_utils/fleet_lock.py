"""The fleet lock: one operator's run at a time (site.yml, rolling_update.yml, rollback.yml, tune.yml).

The lock is a small JSON record on one host (the router host by default, role fleet_lock) naming the run that
holds it: the controller, the user, the ansible-playbook process (its PID and the kernel's start time of that
PID, so that a reused PID is not taken for the holder), the command (program, playbooks, --limit and -i only:
extra vars can carry keys and are never recorded), when it started and a token derived from all of that.

Pure functions: what the controller's run is (``controller_run``, from a /proc reader), whether a holder's
process is gone (``holder_gone``), what to do with the lock (``decide``, ``release_decision``) and the words
for the holder (``describe``). The module ``fleet_lock`` applies them under a file lock on the lock host.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Callable
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
) -> dict[str, object]:
    """The record of the run that ``pid`` (an Ansible worker or the main process) belongs to."""
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
    }


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


def decide(current: dict[str, object] | None, me: dict[str, object], take_over: str) -> str:
    """What to do when ``me`` asks for the lock: 'take' (free), 'keep' (already mine), 'take_over' (a break:
    take_over '*' replaces any holder, take_over <token> only that holder) or 'refuse'."""
    if current is None:
        return "take"
    if current.get("token") == me.get("token"):
        return "keep"
    if take_over == "*" or (take_over and take_over == current.get("token")):
        return "take_over"
    return "refuse"


def release_decision(current: dict[str, object] | None, token: str) -> str:
    """'release' when the lock is held by ``token``; 'free' when no one holds it; 'other' when someone else
    does (a run never releases a lock it does not hold)."""
    if current is None:
        return "free"
    return "release" if current.get("token") == token else "other"


def describe(holder: dict[str, object], now: datetime) -> str:
    """The holder in words: who, where, which process, since when, and what it runs."""
    since = str(holder.get("started", "?"))
    try:
        began = datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        minutes = int((now - began).total_seconds() // 60)
        since += f" ({minutes} min ago)"
    except ValueError:
        pass
    return (
        f"{holder.get('user', '?')}@{holder.get('controller', '?')} "
        f"(ansible-playbook PID {holder.get('pid', '?')}), "
        f"since {since}: {holder.get('command') or '?'}"
    )
