"""The lab's process accounting reader (lab/bench/process_account.py): the kernel's acct v3 records become CPU
seconds by command and by the processes that ran them."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab" / "bench"))

import process_account as pa  # noqa: E402


def comp(ticks: int) -> int:
    """``ticks`` as a comp_t, as the kernel encodes it (mantissa shifted right by 3 per exponent step)."""
    exponent = 0
    while ticks > 0x1FFF:
        ticks >>= 3
        exponent += 1
    return (exponent << 13) | ticks


def record(pid: int, ppid: int, start: int, seconds: float, user: int, system: int, command: bytes) -> bytes:
    """One acct v3 record: CPU in ticks (1/100 s), the lifetime in seconds."""
    etime = seconds * pa.AHZ
    return pa.RECORD.pack(
        0, 3, 0, 0, 0, 0, pid, ppid, start, etime, comp(user), comp(system), 0, 0, 0, 0, 0, 0, command
    )


def test_comp_t_decodes_small_and_large_values() -> None:
    assert pa.comp_seconds(comp(150)) == 1.5
    # 10,000 ticks need an exponent: the kernel keeps 1,250 << 3, exactly 100 s here.
    assert comp(10_000) == (1 << 13) | 1250
    assert pa.comp_seconds(comp(10_000)) == 100.0


def test_records_parse_to_processes_and_other_versions_and_a_partial_tail_are_left_out() -> None:
    data = record(10, 1, 1000, 5.0, 120, 30, b"ansible-playboo")
    other = bytearray(record(11, 1, 1000, 1.0, 100, 0, b"old"))
    other[1] = 2  # a version 2 record
    data += bytes(other) + record(12, 10, 1001, 0.5, 7, 3, b"python3") + b"\0" * 10
    processes = pa.parse(data)
    assert processes == [
        pa.Process(10, 1, 1000.0, 5.0, 1.5, "ansible-playboo"),
        pa.Process(12, 10, 1001.0, 0.5, 0.1, "python3"),
    ]


def test_cpu_by_command_the_costliest_first() -> None:
    processes = [
        pa.Process(1, 0, 0.0, 1.0, 0.5, "ssh"),
        pa.Process(2, 0, 0.0, 1.0, 2.0, "pip3"),
        pa.Process(3, 0, 0.0, 1.0, 0.75, "ssh"),
    ]
    assert pa.by_command(processes) == [
        {"command": "pip3", "cpu_s": 2.0, "processes": 1},
        {"command": "ssh", "cpu_s": 1.2, "processes": 2},
    ]
    assert pa.by_command(processes, top=1) == [{"command": "pip3", "cpu_s": 2.0, "processes": 1}]


def test_a_reused_pid_is_the_parent_that_was_alive_when_the_child_began() -> None:
    first = pa.Process(50, 1, 100.0, 10.0, 1.0, "make")
    second = pa.Process(50, 1, 500.0, 60.0, 2.0, "molecule")
    early = pa.Process(60, 50, 105.0, 1.0, 0.3, "sh")
    late = pa.Process(61, 50, 530.0, 5.0, 4.0, "ansible-playboo")
    orphan = pa.Process(62, 99, 530.0, 1.0, 0.1, "sh")
    assert pa.parents([first, second, early, late, orphan]) == [None, None, first, second, None]


def test_lineage_names_the_nearest_ancestors_up_to_the_depth() -> None:
    make = pa.Process(1, 0, 0.0, 100.0, 0.2, "make")
    pytest = pa.Process(2, 1, 1.0, 90.0, 5.0, "python")
    runs = [pa.Process(10 + i, 2, 2.0 + i, 10.0, 1.5, "ansible-playboo") for i in range(2)]
    worker = pa.Process(20, 10, 3.0, 1.0, 0.3, "ansible-playboo")
    summary = pa.summarize([make, pytest, *runs, worker])
    assert summary["cpu_s"] == 8.5 and summary["processes"] == 5
    assert summary["by_lineage"] == [
        {"lineage": "python < make", "cpu_s": 5.0, "processes": 1},
        {"lineage": "ansible-playboo < python < make", "cpu_s": 3.0, "processes": 2},
        {"lineage": "ansible-playboo < ansible-playboo < python < make", "cpu_s": 0.3, "processes": 1},
        {"lineage": "make", "cpu_s": 0.2, "processes": 1},
    ]
    assert (
        pa.by_lineage([make, pytest, *runs, worker], depth=1)[2]["lineage"]
        == "ansible-playboo < ansible-playboo"
    )
    text = pa.render(summary)
    assert text.splitlines()[0] == "accounted: 8 CPU s in 5 ended processes"
    assert "       3.0       2  ansible-playboo < python < make" in text


def test_per_process_counts_each_kind_of_work_by_its_command_and_ancestors() -> None:
    """Workers are told from main processes by their parent, a module's host by its launcher's line; a
    process of no kind is left out, and a kind that did not run has no row."""
    make = pa.Process(1, 0, 0.0, 100.0, 0.2, "make")
    run = pa.Process(2, 1, 1.0, 90.0, 2.0, "ansible-playboo")
    workers = [pa.Process(10 + i, 2, 2.0 + i, 1.0, 0.03 + 0.01 * i, "ansible-playboo") for i in range(3)]
    sh_outer = pa.Process(20, 10, 2.0, 0.5, 0.0, "sh")
    sh_inner = pa.Process(21, 20, 2.0, 0.5, 0.0, "sh")
    local_module = pa.Process(22, 21, 2.0, 0.5, 0.25, "python3.11")
    sshd = pa.Process(30, 0, 0.0, 100.0, 0.1, "sshd")
    sh_node = pa.Process(31, 30, 5.0, 1.0, 0.0, "sh")
    node_modules = [pa.Process(32 + i, 31, 5.0, 0.5, 0.15, "python3") for i in range(2)]
    stray = pa.Process(40, 1, 3.0, 1.0, 9.0, "python3")  # no module's line: no kind
    processes = [make, run, *workers, sh_outer, sh_inner, local_module, sshd, sh_node, *node_modules, stray]
    rows = pa.per_process(processes)
    assert rows == [
        {"kind": "ansible-playbook, a task's worker", "processes": 3, "cpu_s": 0.1, "per_process": 0.04},
        {"kind": "ansible-playbook, a run's main process", "processes": 1, "cpu_s": 2.0, "per_process": 2.0},
        {"kind": "a module on the controller", "processes": 1, "cpu_s": 0.2, "per_process": 0.25},
        {"kind": "a module on a lab host (over ssh)", "processes": 2, "cpu_s": 0.3, "per_process": 0.15},
    ]
    text = pa.render(pa.summarize(processes))
    assert "per process, work every run does (compare these between runs, not the calibration)" in text
    assert "     0.040       3  ansible-playbook, a task's worker" in text
    assert "per process" not in pa.render({**pa.summarize(processes), "per_process": []})
