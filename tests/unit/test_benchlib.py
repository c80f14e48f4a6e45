"""The lab performance suite's pure helpers (lab/bench/benchlib.py) and the committed docs/benchmarks.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab" / "bench"))

import benchlib  # noqa: E402

# The PLAY RECAP and the start of the TASKS RECAP (profile_tasks) of a real `make lab-up`, blanks cut.
RECAP = (ROOT / "tests" / "fixtures" / "ansible" / "recap-lab-up.txt").read_text(encoding="utf-8")
RECORDS = ROOT / "docs" / "benchmarks"


def test_parse_recap_reads_every_host_and_stops_at_the_tasks_recap() -> None:
    recap = benchlib.parse_recap("PLAY [x]\nok: [a]\n" + RECAP)
    assert sorted(recap) == ["gpu-node-1", "gpu-node-2", "gpu-node-3", "lab-gateway", "localhost"]
    assert recap["lab-gateway"] == {
        "ok": 17,
        "changed": 16,
        "unreachable": 0,
        "failed": 0,
        "skipped": 0,
        "rescued": 0,
        "ignored": 0,
    }


def test_recap_totals_leave_the_control_node_out() -> None:
    totals = benchlib.recap_totals(benchlib.parse_recap(RECAP))
    assert totals == {"hosts": 4, "changed": 25, "failed": 0, "unreachable": 0}


NO_RECAP = ["", "PLAY [x]\nfatal: [a]: FAILED!", "PLAY RECAP ****\n\nTASKS RECAP ***\n"]


@pytest.mark.parametrize("text", NO_RECAP)
def test_parse_recap_refuses_output_without_a_recap(text: str) -> None:
    with pytest.raises(benchlib.BenchError):
        benchlib.parse_recap(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(4.25, "4.2 s"), (48.4, "48 s"), (185, "3 min 05 s"), (3725, "1 h 02 min")],
)
def test_duration(seconds: float, text: str) -> None:
    assert benchlib.duration(seconds) == text


def test_ratio() -> None:
    assert benchlib.ratio(3, 2) == "1.50x"
    assert benchlib.ratio(3, 0) == "n/a"


def _run(seconds: float, changed: int, hosts: int) -> dict[str, Any]:
    return {"seconds": seconds, "totals": {"hosts": hosts, "changed": changed, "failed": 0, "unreachable": 0}}


def test_rows_give_ratios_and_show_a_changed_no_op() -> None:
    stamp = {"date": "2026-11-30", "command": "c", "machine": benchlib.machine(), "commit": "abc"}
    figures = {
        "P1": {
            **stamp,
            "runs": [
                {
                    "nodes": 3,
                    "deploy": _run(100, 5, 4),
                    "noop": {**_run(40, 0, 4), "control_cpu_seconds": 30.0},
                },
                {"nodes": 6, "deploy": _run(300, 90, 7), "noop": _run(60, 2, 7)},
            ],
        },
        "P5": {**stamp, "seconds": 2700, "rc": 0},
    }
    rows = benchlib.rows(figures)
    assert [r[0] for r in rows] == ["P1 no-op re-run of site.yml", "P5 make test wall time"]
    assert "6 hosts: 1 min 00 s, changed=2 over 7 hosts (the" in rows[0][1]  # no CPU figure recorded
    assert "3 hosts: 40 s, changed=0 over 4 hosts, control node CPU 7.5 s per host" in rows[0][1]
    assert "no-op 6/3 hosts: 1.50x" in rows[0][2] and "no-op/deploy (3 hosts): 0.40x" in rows[0][2]
    assert rows[1][1] == "45 min 00 s (exit 0)" and rows[1][2] == "of the 30-minute target: 1.50x"
    text = benchlib.render_markdown(figures, ["docs/benchmarks/p1-noop.png"])
    assert "| P1 no-op re-run of site.yml |" in text and "![p1-noop](benchmarks/p1-noop.png)" in text
    assert "commit abc" in text
    assert "## Where the time went" not in text
    text = benchlib.render_markdown(figures, [], "| before | now |\n| --- | --- |")
    assert "## Where the time went\n\nFrom `docs/benchmarks/history.md`" in text
    assert text.endswith("| before | now |\n| --- | --- |\n")


def test_the_guard_row_gives_detection_against_the_interval() -> None:
    stamp = {"date": "2026-11-30", "command": "c", "machine": benchlib.machine(), "commit": "abc"}
    guard = {
        "interval_s": 10.0,
        "first_failed_verdict_to_out_s": 12.5,
        "poisoned_to_out_intervals": 2.0,
        "poisoned_to_out_s": 20.0,
        "fixed_to_in_s": 70.0,
        "requests": 400,
        "wrong_answers_before_out": 3,
        "wrong_answers_after_out": 0,
        "min_replicas_in_router": 2,
        "guard_cpu_s_per_hour": 36.0,
    }
    (row,) = benchlib.rows({"P6": {**stamp, "guard": guard}})
    assert row[0] == "P6 guard: a node answering garbage"
    assert "3 wrong before it was out, 0 after" in row[1] and "guard CPU 36.0 s per hour" in row[1]
    assert row[2] == "fault to out / interval: 2.00; guard CPU / wall: 1.00%"


def test_the_fail_stop_row_sets_it_beside_the_guard_alone() -> None:
    stamp = {"date": "2026-12-05", "command": "c", "machine": benchlib.machine(), "commit": "abc"}
    fail_stop = dict(
        clients=4, rate_per_s=10, guard_interval_s=10.0, requests=500, wrong_answers=0, failed_requests=1,
        fault_to_nan_line_s=0.4, fault_to_router_out_s=0.5, fault_to_guard_out_s=1.2, fault_to_back_in_s=60.0,
        latency_p99_s=0.4, latency_max_s=3.7, min_replicas_in_router=1, guard_cpu_s_per_hour=12.0,
    )  # fmt: skip
    guard_alone = {
        "clients": 4, "rate_per_s": 10, "guard_interval_s": 10.0, "requests": 800, "wrong_answers": 74,
        "failed_requests": 0, "fault_to_guard_out_s": 15.0, "first_failed_verdict_to_out_s": 9.0,
        "fixed_to_in_s": 30.0, "min_replicas_in_router": 1,
    }  # fmt: skip
    (row,) = benchlib.rows({"P6": {**stamp, "nodes": 2, "fail_stop": fail_stop, "guard_alone": guard_alone}})
    assert row[0] == "P6 a node whose weights turn NaN while it serves"
    assert "With the fail-stop: 500 requests, 0 wrong answers, 1 failed requests" in row[1], row[1]
    assert "The guard alone (fail-stop off, interval 10 s): 800 requests, 74 wrong answers" in row[1], row[1]
    assert row[2] == (
        "wrong answers: 0 with the fail-stop vs 74 with the guard alone; "
        "fault to out: guard alone / fail-stop 30x"
    )


def test_docs_benchmarks_md_is_what_the_records_render_to() -> None:
    """docs/benchmarks.md is generated: it must be what lab/bench/suite.py --render-only writes from the
    committed records and plots (so no figure is edited by hand)."""
    figures = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(RECORDS.glob("P*.json"))}
    # Every figure once make bench has run; P5 (make test) is measured by running this very suite, so while
    # it runs the page holds the others.
    assert figures and set(figures) <= {"P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8"}, "run make bench"
    plots = sorted(str(p) for p in RECORDS.glob("*.png"))
    assert plots, "make bench draws plots beside the records"
    expected = benchlib.render_markdown(figures, plots, benchlib.read_history(RECORDS))
    assert (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8") == expected


def test_the_controller_scale_row_gives_each_size_and_its_ratio_to_the_smallest() -> None:
    def run(nodes: int, inputs: float, ratio: dict | None = None) -> dict:
        per_host = {"baseline": 8.0, "inputs": inputs, "plan": 130.0, "expressions": 150.0}
        return {"nodes": nodes, "per_host_cpu_ms": per_host, **({"ratio_to_first": ratio} if ratio else {})}

    p8 = {
        "date": "2026-12-05",
        "command": "python lab/bench/controller_scale.py",
        "runs": [
            run(16, 1000.0),
            run(1024, 1100.0, {"baseline": 3.0, "inputs": 1.1, "plan": 1.0, "expressions": 1.0}),
        ],
    }
    (row,) = benchlib.rows({"P8": p8})
    assert row[0] == "P8 controller cost per host as the fleet grows"
    assert "16 hosts: one trivial task 8 ms, the inputs play 1000 ms, the plan play 130 ms" in row[1], row[1]
    assert "1024 / 16 hosts: one trivial task 3.00x, the inputs play 1.10x, the plan play 1.00x" in row[2], (
        row[2]
    )


def test_the_throughput_while_a_batch_is_out() -> None:
    report = {
        "seconds": 10,
        "completed_per_s": [8, 8, 8, 4, 4, 4, 8, 8, 8, 8],
        "healthy_timeline": [[0.1, 2, 2], [3.0, 1, 2], [6.0, 2, 2]],
    }
    assert benchlib.batch_throughput(report, 2) == {"requests_per_s": 4.0, "seconds": 3, "out": 1}
    assert benchlib.batch_throughput({**report, "healthy_timeline": [[0.1, 2, 2]]}, 2) is None
    assert benchlib.batch_throughput({"healthy_timeline": report["healthy_timeline"]}, 2) is None
