"""Lab only: the CPU of every process a command ran, by command name and by parent, from the kernel's BSD
process accounting (acct(2), version 3 records; cpu_profile.py --by-command turns it on around the command).

The kernel writes one 64-byte record when a process ends, in the containers too (their PID namespaces are
children of this one): its name (the kernel's 16-byte comm; a process that renamed a thread ends under that
thread's name, as sglang's do), its PID and its parent's, when it began, how long it lived and its user and
system CPU, its threads' included. A process still running when accounting stops has no record.
What cpu_profile.py's groups (containers, the checks half) cannot say, this says: how many ansible-playbook
runs a suite made and what they cost, the module runs on the nodes, the pip installs, the engines' processes.
The functions are pure (tests/unit/test_process_account.py).
"""

from __future__ import annotations

import struct
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime (s), etime (float,
# in AHZ ticks), then comp_t utime, stime, mem, io, rw, minflt, majflt, swaps, and comm[16].
RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")
VERSION = 3
AHZ = 100


class Process(NamedTuple):
    pid: int
    ppid: int
    start: float  # epoch seconds
    seconds: float  # how long it lived
    cpu: float  # user + system CPU seconds
    command: str


def comp_seconds(value: int) -> float:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent, in AHZ ticks) as seconds."""
    return ((value & 0x1FFF) << (3 * ((value >> 13) & 7))) / AHZ


def parse(data: bytes) -> list[Process]:
    """The version 3 records of an accounting file, in the order the kernel wrote them; a trailing partial
    record (the file read while the kernel writes) and records of another version are left out."""
    found = []
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] & 0x7F != VERSION:
            continue
        pid, ppid, began, lived, utime, stime = fields[6:12]
        command = fields[-1].split(b"\0", 1)[0].decode("utf-8", "replace")
        cpu = comp_seconds(utime) + comp_seconds(stime)
        found.append(Process(pid, ppid, float(began), lived / AHZ, cpu, command))
    return found


def _ranked(keyed: Iterable[tuple[str, Process]], label: str, top: int) -> list[dict[str, Any]]:
    """CPU seconds and process counts per key, the costliest ``top`` first, each row's key under ``label``."""
    cpu: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for key, p in keyed:
        cpu[key] += p.cpu
        count[key] += 1
    return [
        {label: key, "cpu_s": round(value, 1), "processes": count[key]} for key, value in cpu.most_common(top)
    ]


def by_command(processes: Iterable[Process], top: int = 25) -> list[dict[str, Any]]:
    """CPU seconds and process counts per command name, the costliest first."""
    return _ranked(((p.command, p) for p in processes), "command", top)


def parents(processes: Sequence[Process]) -> list[Process | None]:
    """Each process's parent among the records: the process with its parent's PID that was alive when it
    began (PIDs are reused over a long suite; a second of slack for the records' whole-second start)."""
    by_pid: dict[int, list[Process]] = defaultdict(list)
    for p in processes:
        by_pid[p.pid].append(p)

    def alive_at(candidates: list[Process], when: float) -> Process | None:
        return next((c for c in candidates if c.start - 1 <= when <= c.start + c.seconds + 1), None)

    return [alive_at(by_pid.get(p.ppid, []), p.start) for p in processes]


def ancestors(processes: Sequence[Process], depth: int) -> list[tuple[str, ...]]:
    """Each process's ``depth`` nearest ancestors' commands, nearest first; an ancestor without a record
    (still running when accounting stopped, or begun before) ends the line."""
    parent_of = dict(zip(map(id, processes), parents(processes), strict=True))

    def line(p: Process) -> tuple[str, ...]:
        found: list[str] = []
        up = parent_of[id(p)]
        while up is not None and len(found) < depth:
            found.append(up.command)
            up = parent_of[id(up)]
        return tuple(found)

    return [line(p) for p in processes]


def by_lineage(processes: Sequence[Process], depth: int = 3, top: int = 25) -> list[dict[str, Any]]:
    """CPU seconds per command and its ``depth`` nearest ancestors ("ansible-playbook < python < make"): who
    ran the processes that cost the most."""
    lines = ancestors(processes, depth)
    return _ranked(
        ((" < ".join((p.command, *line)), p) for p, line in zip(processes, lines, strict=True)),
        "lineage",
        top,
    )


# Work that every make test does about as much of, whatever the change: what one of each costs says how fast
# the host ran that time. Compare these between two runs, not the calibration (the best of five short runs of
# interpreted Python and hashing): in three fresh runs the same ansible-playbook worker cost 0.027, 0.034 and
# 0.038 CPU-s while the calibration said 0.33, 0.38 and 0.39 (docs/journal/measurements.md, eighth session).
# Each kind: a label, its commands, and its nearest ancestors' commands, nearest first; the first that fits.
Kind = tuple[str, frozenset[str], tuple[str, ...]]
KINDS: tuple[Kind, ...] = (
    ("ansible-playbook, a task's worker", frozenset({"ansible-playboo"}), ("ansible-playboo",)),
    ("ansible-playbook, a run's main process", frozenset({"ansible-playboo"}), ()),
    ("ansible, an ad-hoc run's worker", frozenset({"ansible"}), ("ansible",)),
    ("ansible, an ad-hoc run's main process", frozenset({"ansible"}), ()),
    (
        "a module on the controller",
        frozenset({"python", "python3", "python3.11"}),
        ("sh", "sh", "ansible-playboo"),
    ),
    ("a module on a lab host (over ssh)", frozenset({"python3"}), ("sh", "sshd")),
    ("podman", frozenset({"podman"}), ()),
)


def per_process(processes: Sequence[Process], kinds: Sequence[Kind] = KINDS) -> list[dict[str, Any]]:
    """For each kind of process that ran: how many, their CPU seconds in all, and per process."""
    depth = max(len(prefix) for _, _, prefix in kinds)
    # Unrounded sums (not _ranked's rounded rows): a worker's 0.03 CPU-s would lose its second digit.
    cpu: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for p, line in zip(processes, ancestors(processes, depth), strict=True):
        label = next(
            (k for k, commands, prefix in kinds if p.command in commands and line[: len(prefix)] == prefix),
            None,
        )
        if label is not None:
            cpu[label] += p.cpu
            count[label] += 1
    return [
        {
            "kind": label,
            "processes": count[label],
            "cpu_s": round(cpu[label], 1),
            "per_process": round(cpu[label] / count[label], 3),
        }
        for label, _, _ in kinds
        if count[label]
    ]


def summarize(processes: Sequence[Process], top: int = 25) -> dict[str, Any]:
    """The accounted CPU in all, by command and by lineage."""
    return {
        "cpu_s": round(sum(p.cpu for p in processes), 1),
        "processes": len(processes),
        "by_command": by_command(processes, top),
        "by_lineage": by_lineage(processes, top=top),
        "per_process": per_process(processes),
    }


def render(summary: dict[str, Any]) -> str:
    """The summary as text: the total, then a line per command and per lineage."""

    def row(entry: dict[str, Any], key: str) -> str:
        return f"  {entry['cpu_s']:8.1f} {entry['processes']:7d}  {entry[key]}"

    lines = [f"accounted: {summary['cpu_s']:.0f} CPU s in {summary['processes']} ended processes"]
    lines += [row(entry, "command") for entry in summary["by_command"]]
    lines.append("by lineage (command < parent < ...)")
    lines += [row(entry, "lineage") for entry in summary["by_lineage"]]
    if summary.get("per_process"):
        lines.append("per process, work every run does (compare these between runs, not the calibration)")
        lines += [
            f"  {entry['per_process']:8.3f} {entry['processes']:7d}  {entry['kind']}"
            for entry in summary["per_process"]
        ]
    return "\n".join(lines)
