"""The end-of-run fleet summary table."""

from __future__ import annotations

from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import (
    COLUMNS,
    fleet_summary,
    host_row,
)

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
    row = host_row("n1", {**SM120, "sglang_validate_result": {"passed": False}})
    assert row["gpus"] == "8x NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (row["arch"], row["driver"], row["validated"]) == ("sm120", "580.159.04", "FAILED")
    assert host_row("n1", {"sglang_validate_result": {"passed": True}})["validated"] == "passed"


def test_table_is_aligned_and_in_the_given_order() -> None:
    lines = fleet_summary(["b", "a"], {"a": SM120, "b": {}})
    assert lines[0].split() == list(COLUMNS)
    assert [line.split()[0] for line in lines[1:]] == ["b", "a"]
    starts = {line.index(line.split()[1]) for line in lines}
    assert len(starts) == 1, lines


def test_validation_table_has_a_row_per_probe_and_names_the_symptom() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import validation_table

    healthy = {
        "passed": True,
        "probes": [
            {
                "name": "2+2",
                "passed": True,
                "finish_reason": "stop",
                "content": "4",
                "latency_s": 0.041,
                "failures": [],
            }
        ],
    }
    poisoned = {
        "passed": False,
        "msg": "x",
        "probes": [
            {
                "name": "2+2",
                "passed": False,
                "finish_reason": "length",
                "content": "",
                "latency_s": 0.5,
                "failures": ["degenerate output '!!!!!!!!'"],
            }
        ],
        "journal": {"passed": False, "findings": ["probability tensor contains either inf"]},
    }
    lines = validation_table(
        ["n1", "n2", "n3"],
        {"n1": {"sglang_validate_result": healthy}, "n2": {"sglang_validate_result": poisoned}, "n3": {}},
    )
    assert lines[0].split()[:3] == ["host", "probe", "verdict"]
    assert "n1" in lines[1] and "passed" in lines[1] and "0.04" in lines[1]
    assert "n2" in lines[2] and "FAILED" in lines[2] and "!!!!" in lines[2]
    assert "journal" in lines[3] and "probability tensor" in lines[3]
    assert "n3" in lines[4] and "not checked" in lines[4]


def test_row_names_the_release_and_the_resolved_profile() -> None:
    proven = {"level": "seed-run", "rank": 4}
    launch = {"arch": "sm120", "lane": "seed", "sglang_version": "0.5.9", "evidence": proven}
    row = host_row("n1", {"sglang_launch": launch, "sglang_release_name": "0.5.9-0123456789ab"})
    assert row["profile"] == "sm120/seed"
    assert row["release"] == "0.5.9-0123456789ab"
    launch["evidence"] = {"level": "nearby-run", "rank": 3}
    assert host_row("n1", {"sglang_launch": launch})["profile"] == "sm120/seed(nearby-run)"
    del launch["evidence"]
    assert host_row("n1", {"sglang_launch": launch})["profile"] == "sm120/seed(untested)"


def test_a_skipped_check_is_not_a_failure() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import validation_rows

    skipped = {"skipped": True, "changed": False}
    assert host_row("n2", {"sglang_validate_result": skipped})["validated"] == "-"
    assert validation_rows("n2", skipped)[0]["verdict"] == "not checked"


def test_router_cell_says_where_the_replica_is_with_the_symptom() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import router_cell

    failed = {"passed": False, "msg": "probe 2+2: content '!!!!!!!!' is degenerate"}
    assert router_cell("in", {"passed": True}) == "in"
    assert router_cell("out", failed) == "out of the router: probe 2+2: content '!!!!!!!!' is degenerate"
    assert router_cell("out", None) == "out of the router: inference check failed"
    assert router_cell(None, failed) == "-"
    long = router_cell("out", {"msg": "x " * 200})
    assert len(long) <= len("out of the router: ") + 80 and long.endswith("…")


def test_host_row_shows_the_routing_fact() -> None:
    hostvars = {"sglang_validate_result": {"passed": False, "msg": "NaN"}, "sglang_router_replica": "out"}
    row = host_row("n1", hostvars)
    assert (row["validated"], row["router"]) == ("FAILED", "out of the router: NaN")


def test_proven_replicas_are_the_passed_checked_hosts() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import proven_replicas

    hostvars = {
        "a": {"sglang_validate_result": {"passed": True}},
        "b": {"sglang_validate_result": {"passed": False}},
        "c": {"sglang_validate_result": {"skipped": True}},
        "d": {},
    }
    assert proven_replicas(["a", "b", "c", "d"], hostvars) == ["a"]
    assert proven_replicas(["b", "d"], hostvars) == []
