"""The lab's CPU profiler (lab/bench/cpu_profile.py): how cumulative samples become CPU seconds per group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab" / "bench"))

import cpu_profile  # noqa: E402


def test_groups_name_the_lab_the_scenarios_and_the_checks_half() -> None:
    assert cpu_profile.group("glm5-lab-gpu-node-6") == "lab nodes"
    assert cpu_profile.group("glm5-lab-lab-gateway") == "lab-gateway"
    assert cpu_profile.group("glm5-mol-runtime-node") == "scenario containers"
    assert cpu_profile.group(cpu_profile.BACKGROUND) == "checks half (control node)"
    assert cpu_profile.group("something-else") == "container something-else"


def test_deltas_per_group_and_the_unexplained_rest_goes_to_the_control_node() -> None:
    samples = [
        (0.0, 100.0, 50.0, {"glm5-lab-gpu-node-1": 10.0, "glm5-lab-gpu-node-2": 20.0}),
        (30.0, 150.0, 60.0, {"glm5-lab-gpu-node-1": 25.0, "glm5-lab-gpu-node-2": 30.0, "background": 5.0}),
    ]
    summary = cpu_profile.summarize(samples)
    assert summary["seconds"] == 30.0
    # busy 50: nodes 15 + 10, the checks half 5 (a counter that appears counts from zero), the rest 20.
    assert summary["totals"] == {
        "busy": 50.0,
        "lab nodes": 25.0,
        "control node (the rest)": 20.0,
        "idle": 10.0,
        "checks half (control node)": 5.0,
    }


def test_a_container_made_again_counts_from_zero_and_windows_split_the_run() -> None:
    samples = [
        (0.0, 0.0, 0.0, {"glm5-mol-x": 40.0}),
        (200.0, 10.0, 0.0, {"glm5-mol-x": 45.0}),
        (400.0, 20.0, 0.0, {"glm5-mol-x": 3.0}),  # removed and made again: 3 s of the new one
    ]
    summary = cpu_profile.summarize(samples, window=300)
    assert summary["totals"]["scenario containers"] == 8.0
    assert [(w["start"], w["scenario containers"]) for w in summary["windows"]] == [(0, 5.0), (300, 3.0)]
    text = cpu_profile.render(summary)
    assert "scenario containers" in text and text.splitlines()[0] == "400 s sampled: CPU seconds by group"


@pytest.mark.parametrize("figure", cpu_profile.OWN_FIGURES)
def test_steal_and_the_io_stall_are_their_own_figures_and_no_group_is_charged_with_them(figure: str) -> None:
    """Neither is a container's CPU: the control node's rest stays busy minus the containers (80 - 30)."""
    samples = [
        (0.0, 100.0, 50.0, {figure: 7.0, "glm5-lab-gpu-node-1": 10.0}),
        (60.0, 180.0, 60.0, {figure: 19.0, "glm5-lab-gpu-node-1": 40.0}),
    ]
    summary = cpu_profile.summarize(samples)
    assert summary["totals"] == {
        "busy": 80.0,
        "control node (the rest)": 50.0,
        "lab nodes": 30.0,
        figure: 12.0,
        "idle": 10.0,
    }
    header = cpu_profile.render(summary).splitlines()[-2].split()
    assert header[2:5] == ["busy", "idle", figure]


def test_the_calibration_is_printed_when_the_summary_has_it() -> None:
    samples = [(0.0, 0.0, 0.0, {}), (30.0, 10.0, 5.0, {})]
    summary = cpu_profile.summarize(samples)
    assert "calibration" not in cpu_profile.render(summary)
    text = cpu_profile.render({**summary, "calibration_cpu_s": [0.32, 0.41]})
    assert text.splitlines()[1] == "  calibration (CPU s of a fixed work, before / after): 0.32 / 0.41"


def test_the_io_stall_is_read_from_the_full_line_of_the_pressure_file(tmp_path, monkeypatch) -> None:
    pressure = tmp_path / "io"
    pressure.write_text(
        "some avg10=2.03 avg60=4.12 avg300=7.90 total=3251478695\n"
        "full avg10=1.73 avg60=3.69 avg300=6.56 total=2276140287\n"
    )
    monkeypatch.setattr(cpu_profile, "PRESSURE_IO", pressure)
    assert cpu_profile._io_stall_seconds() == 2276.140287
    monkeypatch.setattr(cpu_profile, "PRESSURE_IO", tmp_path / "absent")
    assert cpu_profile._io_stall_seconds() is None


def test_one_sample_is_refused() -> None:
    with pytest.raises(ValueError, match="two samples"):
        cpu_profile.summarize([(0.0, 0.0, 0.0, {})])
