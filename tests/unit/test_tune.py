"""Choosing among tuning candidates (module_utils/tune.py, playbooks/tune.yml)."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.glm5.deploy.plugins.module_utils.tune import TuneError, rank, score, suggestion


def result(name: str, passed: bool, *throughputs: float, error: str = "") -> dict:
    rows = [{"max_concurrency": 2**i, "output_throughput": t, "request_throughput": t / 16} for i, t in
            enumerate(throughputs)]  # fmt: skip
    return {"name": name, "settings": {"max_running_requests": len(name)}, "passed": passed, "rows": rows,
            "error": error}  # fmt: skip


def test_the_fastest_passing_candidate_wins_over_a_faster_failed_one() -> None:
    ranking = rank(
        [
            result("slow", True, 10, 20),
            result("fast-but-nan", False, 999, error="NaN"),
            result("fast", True, 25, 20),
        ],
        "output_throughput",
    )
    assert ranking["best"]["name"] == "fast"
    assert [r["name"] for r in ranking["table"]] == ["fast", "slow", "fast-but-nan"]
    assert ranking["table"][0]["score"] == 45.0 and ranking["table"][2]["score"] is None


def test_no_passing_candidate_means_no_best_and_no_suggestion() -> None:
    ranking = rank([result("a", False, error="inference check failed")], "output_throughput")
    assert ranking["best"] is None
    with pytest.raises(TuneError, match="no candidate passed"):
        suggestion("gpu-node-1", ranking, {}, "output_throughput", "2026-11-30")


def test_suggestion_merges_over_the_inventory_settings_and_explains_itself() -> None:
    ranking = rank([result("ab", True, 5), result("abc", False, error="boom")], "request_throughput")
    text = suggestion(
        "gpu-node-1", ranking, {"dtype": "auto", "max_running_requests": 9}, "request_throughput", "d"
    )
    assert "inventory/<site>/host_vars/gpu-node-1.yml" in text and "Nothing applied it" in text
    assert "#   ab: 0.31" in text and "#   abc: failed: boom" in text
    assert yaml.safe_load(text) == {"sglang_settings": {"dtype": "auto", "max_running_requests": 2}}


@pytest.mark.parametrize(
    ("results", "metric", "message"),
    [
        ([result("a", True, 1)], "latency", "sglang_tune_metric"),
        ([result("a", True, 1), result("a", True, 2)], "output_throughput", "unique"),
        ([result("a", True)], "output_throughput", "no benchmark records"),
    ],
)
def test_bad_results_are_refused(results: list, metric: str, message: str) -> None:
    with pytest.raises(TuneError, match=message):
        rank(results, metric)


def test_score_of_a_failed_candidate_is_none() -> None:
    assert score(result("a", False, 100), "output_throughput") is None
