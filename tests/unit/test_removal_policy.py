"""The one removal policy of the guard and the validate gate (guard_policy.plan_removals and gate_plan), and
the failure kinds judge_verdict gives both: degenerate answers always go out, a probe every replica fails with
sound answers is suspected instead of the replicas, removals are capped per interval, never the last one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils import guard_policy as policy
from ansible_collections.glm5.deploy.plugins.module_utils import judge_verdict as verdict
from ansible_collections.glm5.deploy.plugins.module_utils.guard_policy import (
    ALERT,
    BROKEN,
    DEGENERATE,
    REMOVE,
    RULE_CAP,
    RULE_LAST,
    RULE_SUSPECT,
    WRONG,
    Judgement,
    ReplicaState,
    apply_outcome,
    decide_cycle,
    gate_plan,
    plan_removals,
    removal_budget,
    removal_cap,
    suspect_probes,
)
from ansible_collections.glm5.deploy.plugins.module_utils.judge_probes import (
    normalize_probe,
    normalize_probes,
)
from hypothesis import given
from hypothesis import strategies as st
from sglang_captures import load

FOUR, PRIME = normalize_probes(None)
NAN = Judgement(False, {"2+2": DEGENERATE, "prime": DEGENERATE})
TYPO = Judgement(False, {"2+2": WRONG})
DOWN = Judgement(False, {}, BROKEN, probed=False)
OK = Judgement(True)


def urls(n: int) -> list[str]:
    return [f"http://gpu-node-{i}:30000" for i in range(1, n + 1)]


# --- Failure kinds (judge_verdict)


def judged(name: str, probe: Any = FOUR, logprobs: bool = True) -> verdict.Verdict:
    capture = load(name)
    return verdict.judge_response(capture.status, capture.body, probe, logprobs_requested=logprobs)


@pytest.mark.parametrize(
    "name", ["nan_lnf__chat_greedy", "nan_lnf__chat_greedy_logprobs", "nan_lnf__chat_sampled_t0.8"]
)
def test_nan_answers_are_degenerate(name: str) -> None:
    found = judged(name, logprobs="logprobs" in name)
    assert not found.passed and found.failure_kind == DEGENERATE and found.degenerate
    assert found.classification() == {"failure_kind": "degenerate", "degenerate": True}


def test_a_sound_answer_that_misses_the_expect_is_wrong_not_degenerate() -> None:
    typo = normalize_probe({"name": "2+2", "prompt": "What is 2+2?", "expect": "^five$"})
    found = judged("healthy_chat_2plus2_logprobs", typo)
    assert not found.passed and found.failure_kind == WRONG and not found.degenerate


def test_length_with_sound_logprobs_is_wrong_not_degenerate() -> None:
    """A healthy model given too small a max_tokens: finish_reason length alone is an operator's setting."""
    found = judged("healthy_chat_2plus2_length_in_reasoning", logprobs=False)
    assert not found.passed and found.failure_kind == WRONG


def test_a_passed_answer_has_no_kind_and_to_dict_keeps_its_keys() -> None:
    found = judged("healthy_chat_2plus2_logprobs")
    assert found.passed and found.failure_kind is None and not found.degenerate
    assert "failure_kind" not in found.to_dict() and "degenerate" not in found.to_dict()


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (500, b'{"object": "error", "message": "Internal error"}', BROKEN),
        (500, b'{"object": "error", "message": "RuntimeError: CUDA error: device-side assert"}', DEGENERATE),
        (200, b"not json", BROKEN),
        (401, b"", BROKEN),
    ],
)
def test_error_answers_are_broken_unless_they_carry_a_crash_signature(
    status: int, body: bytes, kind: str
) -> None:
    assert verdict.judge_response(status, body, FOUR).failure_kind == kind


def test_transport_errors_are_broken() -> None:
    assert verdict.judge_transport_error("connection refused").failure_kind == BROKEN


def test_combined_answers_keep_the_worst_kind() -> None:
    nan = judged("nan_lnf__chat_greedy", logprobs=False)
    typo = judged("healthy_chat_2plus2_length_in_reasoning", logprobs=False)
    ok = judged("healthy_chat_2plus2_logprobs")
    assert verdict.combine_answers([ok, typo, nan])[0].failure_kind == DEGENERATE
    assert verdict.combine_answers([ok, typo])[0].failure_kind == WRONG
    assert verdict.combine_answers([ok, ok])[0].failure_kind is None
    assert verdict.combine_answers([nan])[0].failure_kind == DEGENERATE


def test_a_follow_up_that_disagrees_is_broken() -> None:
    first = verdict.Verdict(passed=True, failures=[], content="heliotrope", finish_reason="stop")
    other = verdict.Verdict(passed=True, failures=[], content="marigold", finish_reason="stop")
    assert verdict.judge_follow_up(first, other)[0].failure_kind == BROKEN
    nan = judged("nan_lnf__chat_greedy", logprobs=False)
    assert verdict.judge_follow_up(first, nan)[0].failure_kind == DEGENERATE


def test_judgement_from_the_modules_probe_results() -> None:
    results = [
        {"name": "2+2", "passed": False, "failure_kind": "wrong"},
        {"name": "prime", "passed": True, "failure_kind": None},
        {"name": "old", "passed": False},  # a result without a kind (an older module): broken
    ]
    found = Judgement.from_probes(False, results)
    assert found.failed == {"2+2": WRONG, "old": BROKEN} and found.probed and not found.degenerate
    assert Judgement.from_probes(False, []) == Judgement(False, {}, BROKEN, probed=False)


# --- The cap


@pytest.mark.parametrize(
    ("tracked", "fraction", "cap"),
    [(1, 0.5, 1), (2, 0.5, 1), (3, 0.5, 1), (128, 0.5, 64), (10, 0.1, 1), (10, 1, 10)],
)
def test_removal_cap_is_a_fraction_of_the_tracked_replicas_and_at_least_one(
    tracked: int, fraction: float, cap: int
) -> None:
    assert removal_cap(tracked, fraction) == cap


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5, float("nan"), True, "0.5"])
def test_a_bad_fraction_is_refused(fraction: object) -> None:
    with pytest.raises(policy.PolicyError, match="max_removal_fraction must be a number above 0"):
        policy.check_fraction(fraction)


def test_removal_budget_counts_the_last_window_only() -> None:
    assert removal_budget([], 100.0, 2.0, 3) == 3
    assert removal_budget([97.9, 98.5, 99.9], 100.0, 2.0, 3) == 1
    assert removal_budget([90.0, 99.0, 99.5, 100.0], 100.0, 2.0, 2) == 0


# --- Suspect probes


def test_a_probe_every_replica_fails_with_sound_answers_is_suspect() -> None:
    assert suspect_probes({u: TYPO for u in urls(3)}) == ["2+2"]


@pytest.mark.parametrize(
    ("others", "why"),
    [
        ([OK], "one replica passed it"),
        ([NAN], "one replica failed it degenerate"),
        (
            [Judgement(False, {"prime": WRONG})],
            "one replica answered it soundly (passed it) and failed another",
        ),
    ],
)
def test_a_probe_is_not_suspect_when_one_replica_passes_it_or_answers_it_degenerate(
    others: list[Judgement], why: str
) -> None:
    judged_replicas = {u: TYPO for u in urls(3)} | {f"http://other-{i}": j for i, j in enumerate(others)}
    assert "2+2" not in suspect_probes(judged_replicas), why


def test_replicas_that_could_not_be_asked_say_nothing_about_the_probe() -> None:
    assert suspect_probes({**{u: TYPO for u in urls(2)}, "http://down": DOWN}) == ["2+2"]
    broken = Judgement(False, {"2+2": BROKEN})
    assert suspect_probes({**{u: TYPO for u in urls(2)}, "http://500": broken}) == ["2+2"]


def test_one_replica_alone_never_makes_a_probe_suspect() -> None:
    assert suspect_probes({"http://a": TYPO}) == []


# --- plan_removals


def test_degenerate_replicas_are_exempt_from_the_cap_but_not_from_the_last_healthy_rule() -> None:
    replicas = urls(4)
    plan = plan_removals([(u, NAN) for u in replicas[:3]], {replicas[3]}, budget=1)
    assert plan.remove == replicas[:3] and plan.kept == {} and plan.capped == set() and plan.budget_left == 1
    plan = plan_removals([(u, NAN) for u in replicas], set(), budget=10)
    assert plan.remove == [] and plan.kept == dict.fromkeys(replicas, RULE_LAST)


def test_the_cap_holds_the_rest_in_and_degenerate_ones_go_first() -> None:
    replicas = urls(6)
    broken = Judgement(False, {"2+2": BROKEN})
    candidates = [(u, broken) for u in replicas[:4]] + [(replicas[4], NAN)]
    plan = plan_removals(candidates, {replicas[5]}, budget=2)
    assert plan.remove == [replicas[4], replicas[0], replicas[1]]
    assert plan.kept == {replicas[2]: RULE_CAP, replicas[3]: RULE_CAP} and plan.budget_left == 0


def test_replicas_that_fail_only_a_suspect_probe_stay_in_and_count_as_healthy() -> None:
    replicas = urls(3)
    candidates = [(replicas[0], TYPO), (replicas[1], TYPO), (replicas[2], NAN)]
    plan = plan_removals(candidates, set(), suspects=["2+2"], budget=5)
    assert plan.kept == {replicas[0]: RULE_SUSPECT, replicas[1]: RULE_SUSPECT}
    assert plan.remove == [replicas[2]]  # the NaN one goes: the others answer everything else soundly


def test_a_router_health_candidate_is_capped_like_any_other() -> None:
    plan = plan_removals([("http://a", None), ("http://b", None)], {"http://c"}, budget=1)
    assert plan.remove == ["http://a"] and plan.kept == {"http://b": RULE_CAP}


@given(
    st.lists(st.sampled_from(["nan", "typo", "broken", "down"]), min_size=1, max_size=30),
    st.integers(min_value=0, max_value=10),
    st.integers(min_value=0, max_value=5),
)
def test_invariants_of_plan_removals(kinds: list[str], healthy_count: int, budget: int) -> None:
    table = {"nan": NAN, "typo": TYPO, "broken": Judgement(False, {"2+2": BROKEN}), "down": DOWN}
    candidates = [(f"http://c{i}", table[kind]) for i, kind in enumerate(kinds)]
    healthy = {f"http://h{i}" for i in range(healthy_count)}
    judgements = dict(candidates) | dict.fromkeys(healthy, OK)
    suspects = suspect_probes(judgements)
    plan = plan_removals(candidates, healthy, suspects, budget)
    assert set(plan.remove).isdisjoint(plan.kept) and set(plan.remove) | set(plan.kept) == {
        u for u, _ in candidates
    }
    assert len(plan.capped) <= budget  # the cap holds
    assert all(not judgements[u].degenerate for u in plan.capped)
    if not healthy and not any(rule == RULE_SUSPECT for rule in plan.kept.values()):
        assert plan.remove == []  # never the last healthy replica
    if healthy:
        assert all(u in plan.remove for u, j in candidates if j.degenerate)  # degenerate ones always go


# --- The guard's decisions with the cap and the router's health


def fail_states(replicas: list[str], failures: int, judgement: Judgement = DOWN) -> dict[str, ReplicaState]:
    return {
        u: ReplicaState(
            u,
            verdict="fail",
            symptom="x",
            consecutive_failures=failures,
            in_router=True,
            failed_probes=dict(judgement.failed),
            unprobed=not judgement.probed,
        )
        for u in replicas
    }


def test_127_of_128_failing_removes_at_most_the_cap_and_alerts_for_the_rest() -> None:
    replicas = urls(128)
    states = fail_states(replicas[:127], 1) | {
        replicas[127]: ReplicaState(replicas[127], verdict="pass", in_router=True)
    }
    verdicts = {u: (False, "connection refused", DOWN) for u in replicas[:127]} | {
        replicas[127]: (True, "", OK)
    }
    cap = removal_cap(128)
    decision = decide_cycle(states, verdicts, set(replicas), set(), replicas=replicas, budget=cap, cap=cap)
    removes = [a for a in decision.actions if a.kind == REMOVE]
    alerts = [a for a in decision.actions if a.kind == ALERT]
    assert len(removes) == cap == 64 and all(a.capped for a in removes)
    assert len(alerts) == 127 - 64 and all(
        "removal cap is reached (64 per interval of 128" in a.reason for a in alerts
    )
    assert {decision.states[a.url].kept_by for a in alerts} == {RULE_CAP}
    assert sum(1 for line in decision.lines if line.startswith("alert ")) == 63


def test_suspect_probe_keeps_every_replica_in_and_says_which_probe() -> None:
    replicas = urls(4)
    states = fail_states(replicas, 1, TYPO)
    verdicts = {u: (False, "probe '2+2': content '4' does not match", TYPO) for u in replicas}
    decision = decide_cycle(states, verdicts, set(replicas), set(), replicas=replicas, budget=2, cap=2)
    assert [a.kind for a in decision.actions] == [ALERT] * 4
    assert all(
        "fails probe '2+2' with sound answers: the probe is suspect" in a.reason for a in decision.actions
    )


def test_a_replica_the_router_reports_unhealthy_goes_out_at_once_and_back_after_m_passes() -> None:
    a, b = urls(2)
    states = {u: ReplicaState(u, verdict="pass", consecutive_passes=5, in_router=True) for u in (a, b)}
    decision = decide_cycle(
        states, {}, {a, b}, set(), replicas=[a, b], unhealthy={b}, budget=1, cap=1, fresh=set()
    )
    assert [(x.kind, x.url, x.reason) for x in decision.actions] == [(REMOVE, b, policy.ROUTER_UNHEALTHY)]
    assert f"note replica={b} {policy.ROUTER_UNHEALTHY}: taking it out at once" in decision.lines
    state, lines = apply_outcome(decision.states[b], decision.actions[0], True)
    assert lines == [f"transition replica={b} out at once: {policy.ROUTER_UNHEALTHY}"]
    assert state.consecutive_passes == 0 and state.removed_by_guard
    states = {**decision.states, b: state}
    for number in range(1, 4):
        decision = decide_cycle(states, {a: (True, ""), b: (True, "")}, {a}, set(), replicas=[a, b], budget=1)
        assert [x.kind for x in decision.actions] == (["add"] if number == 3 else []), number
        states = decision.states


def test_the_router_cannot_take_out_the_last_healthy_replica_and_alerts_once() -> None:
    a, b = urls(2)
    states = {
        a: ReplicaState(a, verdict="pass", in_router=True),
        b: ReplicaState(b, verdict="fail", in_router=True),
    }
    decision = decide_cycle(states, {}, {a, b}, set(), replicas=[a, b], unhealthy={a}, fresh=set())
    assert [(x.kind, x.url) for x in decision.actions] == [(ALERT, a)]
    again = decide_cycle(decision.states, {}, {a, b}, set(), replicas=[a, b], unhealthy={a}, fresh=set())
    assert again.actions == []  # kept in by the same rule: no new alert at every poll


# --- The validate gate


def result(passed: bool, kinds: Mapping[str, str | None] | None = None, **extra: Any) -> dict[str, Any]:
    probes = [{"name": n, "passed": k is None, "failure_kind": k} for n, k in (kinds or {}).items()]
    return {"passed": passed, "probes": probes, "msg": "" if passed else "failed", **extra}


GOOD = {"2+2": None, "prime": None}


def test_gate_a_typo_in_a_probe_fails_every_replica_and_the_router_stays_as_it_was() -> None:
    results = {f"n{i}": result(False, {"2+2": "wrong", "prime": None}) for i in range(4)}
    plan = gate_plan(results, tracked=4)
    assert plan["suspects"] == ["2+2"]
    assert {h["state"] for h in plan["hosts"].values()} == {"unchanged"}
    assert {h["rule"] for h in plan["hosts"].values()} == {RULE_SUSPECT}


def test_gate_a_nan_node_beside_a_healthy_one_goes_out() -> None:
    plan = gate_plan({"n1": result(True, GOOD), "n2": result(False, {"2+2": "degenerate"})}, tracked=2)
    assert plan["hosts"] == {
        "n1": {"state": "present", "rule": "passed"},
        "n2": {"state": "absent", "rule": "degenerate"},
    }
    assert plan["suspects"] == []


def test_gate_caps_removals_that_are_not_degenerate_and_never_empties_the_router() -> None:
    results = {f"n{i}": result(False, {"2+2": "broken"}) for i in range(1, 8)} | {"n8": result(True, GOOD)}
    plan = gate_plan(results, tracked=8, fraction=0.25)
    states = [plan["hosts"][f"n{i}"]["state"] for i in range(1, 8)]
    assert states == ["absent", "absent"] + ["unchanged"] * 5 and plan["cap"] == 2
    assert {plan["hosts"][f"n{i}"]["rule"] for i in range(3, 8)} == {RULE_CAP}
    every = gate_plan({f"n{i}": result(False, {"2+2": "degenerate"}) for i in range(3)}, tracked=3)
    assert {h["rule"] for h in every["hosts"].values()} == {RULE_LAST}


def test_gate_counts_replicas_outside_the_run_as_healthy_and_leaves_unjudged_hosts_alone() -> None:
    alone = {"n1": result(False, {"2+2": "degenerate"})}
    assert gate_plan(alone, tracked=2)["hosts"]["n1"]["rule"] == RULE_LAST
    assert gate_plan(alone, tracked=2, outside=1)["hosts"]["n1"] == {"state": "absent", "rule": "degenerate"}
    rank1 = gate_plan({"n1": result(True, GOOD), "n1b": {"skipped": True}, "n2": None}, tracked=1)
    assert rank1["hosts"]["n1b"] == rank1["hosts"]["n2"] == {"state": "unchanged", "rule": "not judged"}


def test_gate_a_check_that_failed_before_the_probes_is_broken() -> None:
    plan = gate_plan(
        {"n1": result(True, GOOD), "n2": {"passed": False, "probes": [], "msg": "no model"}}, tracked=2
    )
    assert plan["hosts"]["n2"] == {"state": "absent", "rule": "failed"}


def test_gate_a_journal_finding_is_a_failure_of_its_own() -> None:
    journal = {"passed": False, "findings": ["line 3, CUDA error"]}
    results = {f"n{i}": result(False, {"2+2": "wrong"}) for i in range(3)}
    results["n0"] = result(False, {"2+2": "wrong"}, journal=journal)
    results["n9"] = result(True, GOOD)
    plan = gate_plan(results, tracked=4)
    assert plan["suspects"] == []  # n9 passed it
    assert plan["hosts"]["n0"]["state"] == "absent"
