#!/usr/bin/env python3
"""Lab only: where a command's CPU goes on this machine, sampled while it runs (make test, a deploy, a bench).

    python lab/bench/cpu_profile.py [--interval 30] [--window 300] [--out FILE.json] -- CMD...

Every --interval seconds it records the machine's busy, idle and stolen CPU (/proc/stat), each podman
container's CPU (its cgroup v1 cpuacct.usage under libpod_parent, by container name) and the CPU of
lab/bin/background's cgroup (make test's checks half, on the control node). When CMD ends it prints, and
writes to --out (default build/bench/cpu-profile.json), the CPU seconds per group (lab nodes, lab-gateway,
the container scenarios' containers, the checks half, the rest of the control node, the steal) and the
seconds when every task with work waited for the disk (the kernel's pressure stall figure, /proc/pressure/io
"full") in all and per --window seconds, and exits with CMD's exit code. Before and after CMD it times a fixed
piece of work (calibrate): the same suite takes minutes more at some hours of the shared host than at others,
and a comparison of two runs needs these figures beside it. A benchmark, not a test: nothing is asserted about
time. The summary is pure (summarize, below; tests/unit/test_cpu_profile.py).

With --by-command (root), the kernel's process accounting is on while CMD runs, into --out's .pacct file
beside it: the summary adds the CPU of every process that ended by command name and by parent
(process_account.py), what the groups above cannot say (how many ansible-playbook runs, module runs on the
nodes, pip installs). Accounting is machine-wide and one file at a time: it is turned off when CMD ends.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import process_account

ROOT = Path(__file__).resolve().parents[2]
PODMAN_CGROUPS = Path("/sys/fs/cgroup/cpuacct/libpod_parent")
BACKGROUND = "background"
BACKGROUND_CGROUP = Path("/sys/fs/cgroup/cpuacct/glm5-background/cpuacct.usage")
REST = "control node (the rest)"
# The time the hypervisor gave another guest while this machine had work (/proc/stat's steal): neither busy
# nor idle here, and the reason one run of the same commit is slower than another on a shared host.
STEAL = "steal"
# Seconds when every task that had work was waiting for the disk (/proc/pressure/io, the "full" line): wall
# seconds, not CPU seconds, so its own figure too.
IO_STALL = "io-stall"
OWN_FIGURES = (STEAL, IO_STALL)
PRESSURE_IO = Path("/proc/pressure/io")

# time, busy s, idle s, CPU s by container name (or BACKGROUND)
Sample = tuple[float, float, float, dict[str, float]]


def group(name: str) -> str:
    """The group a sampled counter belongs to."""
    if name == BACKGROUND:
        return "checks half (control node)"
    if name.startswith("glm5-lab-gpu-node-"):
        return "lab nodes"
    if name.startswith("glm5-lab-"):
        return "lab-gateway"
    if name.startswith("glm5-mol-"):
        return "scenario containers"
    return f"container {name}"


def summarize(samples: Sequence[Sample], window: float = 300) -> dict[str, Any]:
    """CPU seconds per group in all and per window, from cumulative samples.

    A counter that first appears in a sample counts from zero (a container made since the last sample); one
    that goes down was reset (a container made again under the same name) and counts from zero again. The
    control node's rest is the machine's busy time that no counter explains."""
    if len(samples) < 2:
        raise ValueError("at least two samples are needed")
    start = samples[0][0]
    totals: Counter[str] = Counter()
    windows: dict[int, Counter[str]] = {}
    for (_, busy0, idle0, seen0), (now, busy, idle, seen) in itertools.pairwise(samples):
        slot = windows.setdefault(int((now - start - 1e-9) // window), Counter())
        delta = {"busy": busy - busy0, "idle": idle - idle0}
        explained = 0.0
        for name, value in seen.items():
            before = seen0.get(name, 0.0)
            used = value - before if value >= before else value
            if name in OWN_FIGURES:
                delta[name] = used
                continue
            delta[group(name)] = delta.get(group(name), 0.0) + used
            explained += used
        delta[REST] = delta["busy"] - explained
        for key, value in delta.items():
            totals[key] += value
            slot[key] += value
    return {
        "seconds": samples[-1][0] - start,
        "window": window,
        "totals": {k: round(v, 1) for k, v in totals.most_common()},
        "windows": [
            {"start": int(i * window), **{k: round(v, 1) for k, v in slot.items()}}
            for i, slot in sorted(windows.items())
        ],
    }


def render(summary: dict[str, Any]) -> str:
    """The summary as text: totals, then one line per window."""
    totals = summary["totals"]
    lines = [f"{summary['seconds']:.0f} s sampled: CPU seconds by group"]
    if "calibration_cpu_s" in summary:
        before, after = summary["calibration_cpu_s"]
        lines.append(f"  calibration (CPU s of a fixed work, before / after): {before} / {after}")
    lines += [f"  {name:32s} {value:9.0f}" for name, value in totals.items()]
    keys = [k for k in totals if k not in ("busy", "idle", *OWN_FIGURES)]
    first = ["busy", "idle", *(k for k in OWN_FIGURES if k in totals)]
    lines.append("window (min) " + " ".join(f"{k[:12]:>12s}" for k in [*first, *keys]))
    for slot in summary["windows"]:
        cells = " ".join(f"{slot.get(k, 0.0):12.0f}" for k in [*first, *keys])
        lines.append(f"{slot['start'] // 60:12d} {cells}")
    return "\n".join(lines)


def _cpu_seconds(path: Path) -> float | None:
    try:
        return int(path.read_text()) / 1e9
    except (OSError, ValueError):
        return None


def _io_stall_seconds() -> float | None:
    """The kernel's cumulative "full" I/O pressure stall time, in seconds (None without PSI)."""
    try:
        full = next(line for line in PRESSURE_IO.read_text().splitlines() if line.startswith("full "))
    except (OSError, StopIteration):
        return None
    return int(full.rsplit("total=", 1)[1]) / 1e6


def calibrate(repeat: int = 5) -> float:
    """The CPU seconds of a fixed piece of single-threaded work (interpreted Python and hashing), the best of
    ``repeat`` (about a third of a second each on this machine's 2-core VM): the same figure on two days says
    the host gave the same single-threaded speed."""
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        total = 0
        for i in range(3_000_000):
            total += i * i % 7
        digest = hashlib.sha256()
        block = b"glm5" * (1 << 18)
        for _ in range(256):
            digest.update(block)
        best = min(best, time.process_time() - started)
    return round(best, 3)


def sample() -> Sample:
    """One reading of the machine, the containers and the checks half's cgroup."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(v) / 100 for v in fields]
    busy, idle = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6], ticks[3] + ticks[4]
    steal = ticks[7] if len(ticks) > 7 else 0.0
    try:
        shown = subprocess.run(
            ["podman", "ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Names}}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
    except OSError:  # a fresh machine: make installs podman during the command
        shown = ""
    seen: dict[str, float] = {STEAL: steal}
    stall = _io_stall_seconds()
    if stall is not None:
        seen[IO_STALL] = stall
    for line in shown.splitlines():
        cid, _, name = line.partition(" ")
        used = _cpu_seconds(PODMAN_CGROUPS / f"libpod-{cid}" / "cpuacct.usage")
        if used is not None:
            seen[name] = used
    background = _cpu_seconds(BACKGROUND_CGROUP)
    if background is not None:
        seen[BACKGROUND] = background
    return time.time(), busy, idle, seen


def accounting(path: Path | None) -> str:
    """The kernel's process accounting on into ``path`` (an existing file), or off (None): acct(2). The
    error, or "" when it worked."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(os.fsencode(path) if path else None) == 0:
        return ""
    return os.strerror(ctypes.get_errno())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=30)
    parser.add_argument("--window", type=float, default=300)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench" / "cpu-profile.json")
    parser.add_argument("--by-command", action="store_true", help="add the CPU by process (root: acct(2))")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to profile after --")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    accounted = args.out.with_suffix(".pacct") if args.by_command else None
    if accounted:
        accounted.write_bytes(b"")
        accounted.chmod(0o600)
        problem = accounting(accounted)
        if problem:
            print(f"cpu_profile: no process accounting ({problem}): the groups only", file=sys.stderr)
            accounted = None
    calibration = [calibrate()]
    samples = [sample()]
    done = threading.Event()

    def sampler() -> None:
        while not done.wait(args.interval):
            samples.append(sample())

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        rc = subprocess.call(command)
    finally:
        done.set()
        thread.join()
        samples.append(sample())
        if accounted:
            accounting(None)
    calibration.append(calibrate())
    summary = {
        "command": command,
        "rc": rc,
        "calibration_cpu_s": calibration,
        **summarize(samples, args.window),
    }
    if accounted:
        summary["processes"] = process_account.summarize(process_account.parse(accounted.read_bytes()))
    args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(render(summary))
    if accounted:
        print(process_account.render(summary["processes"]))
    return rc


if __name__ == "__main__":
    sys.exit(main())
