"""The end-of-run fleet summary table."""

from __future__ import annotations

from ansible.module_utils.fleet_summary import COLUMNS, fleet_summary, host_row

SM120 = {
    "nvidia_gpu": {
        "arch": "sm120",
        "count": 8,
        "names": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"],
        "driver_version": "580.159.04",
    }
}


def test_row_of_a_host_where_nothing_ran_is_dashes() -> None:
    assert host_row("n1", {}) == {"host": "n1", **dict.fromkeys(COLUMNS[1:], "-")}


def test_row_reports_gpus_and_validation_verdict() -> None:
    row = host_row("n1", {**SM120, "sglang_validation": {"passed": False}})
    assert row["gpus"] == "8x NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (row["arch"], row["driver"], row["validated"]) == ("sm120", "580.159.04", "FAILED")
    assert host_row("n1", {"sglang_validation": {"passed": True}})["validated"] == "passed"


def test_table_is_aligned_and_in_the_given_order() -> None:
    lines = fleet_summary(["b", "a"], {"a": SM120, "b": {}})
    assert lines[0].split() == list(COLUMNS)
    assert [line.split()[0] for line in lines[1:]] == ["b", "a"]
    starts = {line.index(line.split()[1]) for line in lines}
    assert len(starts) == 1, lines
