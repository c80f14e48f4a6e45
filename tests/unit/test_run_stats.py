"""What site.yml, validate.yml and the rollouts publish with set_stats (module_utils/run_stats.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.run_stats import fleet_stats, rollout_entry

LAUNCH = {"arch": "sm120", "lane": "current", "evidence": {"level": "seed-run", "rank": 3}}


def node(**extra: Any) -> dict[str, Any]:
    return {
        "nvidia_gpu": {"count": 8, "names": ["RTX PRO 6000"], "arch": "sm120", "driver_version": "580"},
        "sglang_release_name": "0.5.23-abc",
        "sglang_launch": LAUNCH,
        "model_checkpoint_repo": "nvidia/GLM-5-NVFP4",
        "model_checkpoint_revision": "deadbeef",
        **extra,
    }


HOSTVARS = {
    "gpu01": node(sglang_validate_result={"passed": True}, sglang_router_replica="in"),
    "gpu02": node(
        sglang_validate_result={"passed": False, "msg": "degenerate: '!!!!'"}, sglang_router_replica="out"
    ),
    "gpu03": node(sglang_server_health={"verdict": "failed", "symptom": "NaN detected! sampler"}),
    "gpu04": node(sglang_validate_result={"skipped": True}),
}


def test_the_fleets_results_name_each_replicas_verdict_symptom_and_router() -> None:
    stats = fleet_stats(list(HOSTVARS), HOSTVARS, "https://gw:8443")
    assert stats["endpoint"] == "https://gw:8443"
    assert (stats["model"], stats["checkpoint_revision"], stats["release"]) == (
        "nvidia/GLM-5-NVFP4",
        "deadbeef",
        "0.5.23-abc",
    )
    assert stats["evidence"] == "seed-run"
    assert (stats["passed"], stats["failed"], stats["routed"]) == (1, 2, 1)
    replicas = stats["replicas"]
    assert replicas["gpu01"] == {
        "verdict": "passed",
        "symptom": "",
        "router": "in",
        "release": "0.5.23-abc",
        "profile": "sm120/current",
        "evidence": "seed-run",
        "checkpoint_revision": "deadbeef",
    }
    assert replicas["gpu02"]["verdict"] == "FAILED" and replicas["gpu02"]["symptom"] == "degenerate: '!!!!'"
    assert (
        replicas["gpu03"]["verdict"] == "FAILED at start" and "NaN detected" in replicas["gpu03"]["symptom"]
    )
    assert replicas["gpu04"]["verdict"] == "-" and replicas["gpu04"]["router"] == "-"


def test_hosts_that_disagree_are_all_named_and_nothing_is_a_dash() -> None:
    hostvars = {"a": node(), "b": node(model_checkpoint_revision="cafe"), "c": {}}
    stats = fleet_stats(["a", "b", "c"], hostvars, "")
    assert stats["checkpoint_revision"] == "cafe, deadbeef"
    assert stats["endpoint"] == "-"
    assert stats["replicas"]["c"]["profile"] == "-" and stats["replicas"]["c"]["evidence"] == "-"


def test_a_rollout_entry_says_what_became_of_the_replica() -> None:
    ok = rollout_entry("gpu01", HOSTVARS["gpu01"], "updated")
    assert ok == {
        "gpu01": {**fleet_stats(["gpu01"], HOSTVARS, "")["replicas"]["gpu01"], "outcome": "updated"}
    }
    failed = node(
        sglang_rollout_failure="gpu02 failed the inference check", sglang_rollout_restore_failure=""
    )
    restored = rollout_entry("gpu02", failed, "restored")["gpu02"]
    assert restored["outcome"] == "restored" and restored["symptom"] == "gpu02 failed the inference check"
    both = node(sglang_rollout_failure="health wait timed out", sglang_rollout_restore_failure="unit failed")
    lost = rollout_entry("gpu02", both, "restore failed")["gpu02"]
    assert lost["symptom"] == "health wait timed out; restore: unit failed"


def test_a_node_left_out_of_the_run_is_counted_and_says_why() -> None:
    hostvars = {**HOSTVARS, "gpu05": {"glm5_left_out": "preflight: gpu05 has 4 GPU(s)"}}
    stats = fleet_stats(list(hostvars), hostvars, "")
    assert stats["left_out"] == 1 and stats["failed"] == 2
    assert stats["replicas"]["gpu05"]["verdict"] == "LEFT OUT"
    assert stats["replicas"]["gpu05"]["symptom"] == "left out of the run: preflight: gpu05 has 4 GPU(s)"
