"""The content guard's decisions: K failures out, M passes back (whoever took it out), holds, last replica."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.guard_policy import (
    ADD,
    ALERT,
    DEFAULT_FAIL_AFTER,
    DEFAULT_RECOVER_AFTER,
    FAIL,
    HELD,
    LABEL_MAX,
    LAST_REPLICA_REASON,
    PASS,
    REMOVE,
    Action,
    CycleDecision,
    PolicyError,
    ReplicaState,
    apply_outcome,
    clip,
    decide_cycle,
    healthy_replicas,
    label_symptom,
    quote,
    render_alert,
    render_transition,
    render_verdict,
    scrub,
    symptom_from_probes,
)
from hypothesis import given
from hypothesis import strategies as st

A = "http://gpu-node-1:30000"
B = "http://gpu-node-2:30000"
C = "http://gpu-node-3:30000"
NAN = "probe '2+2': degenerate output '!!!!!!!!!!!!!!!!' ('!' repeated 16 times) in reasoning_content"
OK = (True, "")
BAD = (False, NAN)


def cycle(
    states: Mapping[str, ReplicaState],
    verdicts: Mapping[str, tuple[bool, str]],
    registered: Iterable[str] | None,
    held: Iterable[str] = (),
    *,
    replicas: tuple[str, ...] = (A, B),
    k: int = DEFAULT_FAIL_AFTER,
    m: int = DEFAULT_RECOVER_AFTER,
) -> CycleDecision:
    return decide_cycle(
        states,
        verdicts,
        None if registered is None else set(registered),
        set(held),
        k,
        m,
        now=1000.0,
        replicas=replicas,
    )


def settle(decision: CycleDecision, failed: Mapping[str, str] | None = None) -> dict[str, ReplicaState]:
    """Apply every remove/add as the router would answer: done, unless its URL is in ``failed``."""
    states = dict(decision.states)
    for action in decision.actions:
        ok = action.url not in (failed or {})
        states[action.url], _ = apply_outcome(
            states[action.url], action, ok, (failed or {}).get(action.url, "")
        )
    return states


def kinds(decision: CycleDecision) -> list[tuple[str, str]]:
    return [(action.kind, action.url) for action in decision.actions]


# --- Counting


def test_defaults_are_two_failures_out_three_passes_back() -> None:
    assert (DEFAULT_FAIL_AFTER, DEFAULT_RECOVER_AFTER) == (2, 3)


def test_first_cycle_creates_states_and_counts_verdicts() -> None:
    decision = cycle({}, {A: OK, B: BAD}, {A, B})
    a, b = decision.states[A], decision.states[B]
    assert (a.verdict, a.consecutive_passes, a.consecutive_failures, a.in_router) == (PASS, 1, 0, True)
    assert (b.verdict, b.consecutive_passes, b.consecutive_failures, b.symptom) == (FAIL, 0, 1, NAN)
    assert a.last_check == b.last_check == 1000.0
    assert decision.actions == []
    assert decision.lines == [
        f"verdict replica={A} result=pass passes=1",
        f'verdict replica={B} result=fail failures=1 symptom="{NAN}"',
    ]


def test_previous_states_are_not_modified() -> None:
    before = {A: ReplicaState(A, verdict=PASS, consecutive_passes=4, in_router=True)}
    cycle(before, {A: BAD, B: OK}, {A, B})
    assert before[A] == ReplicaState(A, verdict=PASS, consecutive_passes=4, in_router=True)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_out_after_exactly_k_consecutive_failures(k: int) -> None:
    states: dict[str, ReplicaState] = {}
    for number in range(1, k + 1):
        decision = cycle(states, {A: OK, B: BAD}, {A, B}, k=k)
        if number < k:
            assert decision.actions == [], number
        states = settle(decision)
    assert kinds(decision) == [(REMOVE, B)]
    assert decision.actions[0].reason == f"{k} failed verdicts: {NAN}"
    assert (states[B].in_router, states[B].removed_by_guard, states[B].transitions_out) == (False, True, 1)


def test_a_pass_resets_the_failure_streak() -> None:
    states: dict[str, ReplicaState] = {}
    for verdict in (BAD, OK, BAD):
        decision = cycle(states, {A: OK, B: verdict}, {A, B})
        assert decision.actions == []
        states = settle(decision)
    assert states[B].consecutive_failures == 1


def test_back_after_exactly_m_passes() -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, consecutive_passes=9, in_router=True),
        B: ReplicaState(B, verdict=FAIL, consecutive_failures=5, removed_by_guard=True, transitions_out=1),
    }
    for number in range(1, 4):
        decision = cycle(states, {A: OK, B: OK}, {A})
        states = settle(decision)
        if number < 3:
            assert decision.actions == [], number
    assert kinds(decision) == [(ADD, B)]
    assert decision.actions[0].reason == "3 passed verdicts"
    b = states[B]
    assert (b.in_router, b.removed_by_guard, b.transitions_in, b.transitions_out) == (True, False, 1, 1)


def test_a_failure_resets_the_pass_streak_of_a_removed_replica() -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=FAIL, removed_by_guard=True),
    }
    for verdict in (OK, OK, BAD, OK, OK):
        decision = cycle(states, {A: OK, B: verdict}, {A})
        assert not [a for a in decision.actions if a.kind == ADD]
        states = settle(decision)
    assert states[B].consecutive_passes == 2


def test_the_whole_life_of_a_poisoned_replica() -> None:
    """Registered, poisoned (out after 2), healed (back after 3), with the counts and lines of each step."""
    states: dict[str, ReplicaState] = {}
    script = [BAD, BAD, BAD, OK, OK, OK, OK]
    expected = [[], [(REMOVE, B)], [], [], [], [(ADD, B)], []]
    registered = {A, B}
    for verdict, wanted in zip(script, expected, strict=True):
        decision = cycle(states, {A: OK, B: verdict}, registered)
        assert kinds(decision) == wanted
        states = settle(decision)
        registered = {url for url, state in states.items() if state.in_router}
    b = states[B]
    assert (b.transitions_out, b.transitions_in, b.in_router, b.removed_by_guard) == (1, 1, True, False)


# --- Back after M passes, whoever took it out


@pytest.mark.parametrize("m", [1, 2, 3, 5])
@pytest.mark.parametrize("by_guard", [False, True], ids=["out-by-someone-else", "out-by-the-guard"])
def test_an_absent_unheld_replica_comes_back_after_exactly_m_passes_whoever_took_it_out(
    m: int, by_guard: bool
) -> None:
    """A playbook (the replica failed its check at deploy time), an operator or the guard: the same rule."""
    states = {
        A: ReplicaState(A, verdict=PASS, consecutive_passes=9, in_router=True),
        B: ReplicaState(B, verdict=FAIL, consecutive_failures=4, symptom=NAN, removed_by_guard=by_guard),
    }
    for number in range(1, m + 1):
        decision = cycle(states, {A: OK, B: OK}, {A}, m=m)
        if number < m:
            assert decision.actions == [], f"only {number} of {m} passes: not yet"
            assert not decision.states[B].in_router
        states = settle(decision)
    assert kinds(decision) == [(ADD, B)]
    assert decision.actions[0].reason == f"{m} passed verdicts"
    b = states[B]
    assert (b.in_router, b.removed_by_guard, b.transitions_in) == (True, False, 1)
    _, lines = apply_outcome(decision.states[B], decision.actions[0], True)
    assert lines == [f"transition replica={B} in after {m} passed verdicts"]


def test_an_absent_replica_with_fewer_than_m_passes_is_not_added_yet() -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=PASS, consecutive_passes=1),
    }
    decision = cycle(states, {A: OK, B: OK}, {A})  # 2 of 3
    assert decision.actions == [] and decision.states[B].consecutive_passes == 2
    decision = cycle(decision.states, {A: OK, B: BAD}, {A})  # the streak breaks
    decision = cycle(decision.states, {A: OK, B: OK}, {A})
    assert decision.actions == [] and decision.states[B].consecutive_passes == 1


def test_an_absent_held_replica_is_never_added_however_many_passes() -> None:
    """A hold is the only way to keep a passing replica out; its streak restarts when it is released."""
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=PASS, consecutive_passes=50),
    }
    for _ in range(20):
        decision = cycle(states, {A: OK, B: OK}, {A}, held=(B,))
        assert decision.actions == []
        states = settle(decision)
    assert (states[B].held, states[B].verdict, states[B].in_router) == (True, HELD, False)
    # Released: M fresh passes before it comes back.
    for number in range(1, DEFAULT_RECOVER_AFTER + 1):
        decision = cycle(states, {A: OK, B: OK}, {A})
        assert kinds(decision) == ([(ADD, B)] if number == DEFAULT_RECOVER_AFTER else []), number
        states = settle(decision)
    assert states[B].in_router


def test_a_router_that_lost_all_its_workers_is_refilled_after_m_passes() -> None:
    """The router starts with no workers; restarted outside Ansible it comes back empty. The guard refills it
    with every replica whose last M verdicts passed, and leaves out a failing one until it has passed M."""
    replicas = (A, B, C)
    states: dict[str, ReplicaState] = {}
    for _ in range(4):  # a steady fleet
        states = settle(cycle(states, {A: OK, B: OK, C: OK}, {A, B, C}, replicas=replicas))

    # The router restarts empty while C turns bad: A and B have passed M times in a row already.
    decision = cycle(states, {A: OK, B: OK, C: BAD}, set(), replicas=replicas)
    assert kinds(decision) == [(ADD, A), (ADD, B)]
    assert not [line for line in decision.lines if line.startswith("note ")]  # nobody "put it back"
    states = settle(decision)
    assert {url for url, s in states.items() if s.in_router} == {A, B}
    assert (states[C].in_router, states[C].removed_by_guard) == (False, False)

    # C heals: back after M passes, though the guard never took it out.
    registered = {A, B}
    for number in range(1, DEFAULT_RECOVER_AFTER + 1):
        decision = cycle(states, {A: OK, B: OK, C: OK}, registered, replicas=replicas)
        assert kinds(decision) == ([(ADD, C)] if number == DEFAULT_RECOVER_AFTER else []), number
        states = settle(decision)
    assert all(s.in_router for s in states.values())


@pytest.mark.parametrize("m", [1, 3])
def test_a_guard_that_starts_with_an_empty_router_fills_it_after_m_passes(m: int) -> None:
    """No state yet (first start, or a lost state file) and nothing registered: every replica that passes M
    times in a row is added; the first M - 1 cycles add nothing."""
    replicas = (A, B, C)
    states: dict[str, ReplicaState] = {}
    registered: set[str] = set()
    for number in range(1, m + 1):
        decision = cycle(states, {A: OK, B: OK, C: BAD}, registered, replicas=replicas, m=m)
        assert kinds(decision) == ([(ADD, A), (ADD, B)] if number == m else []), number
        states = settle(decision)
        registered = {url for url, s in states.items() if s.in_router}
    assert registered == {A, B}


def test_a_replica_put_back_by_a_playbook_is_no_longer_the_guards() -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=PASS, consecutive_passes=1, removed_by_guard=True),
    }
    decision = cycle(states, {A: OK, B: OK}, {A, B})
    b = decision.states[B]
    assert (b.removed_by_guard, b.in_router) == (False, True)
    assert decision.actions == []
    assert any(line.startswith(f"note replica={B} is back in the router") for line in decision.lines)
    # Taken out later by an operator who keeps it out: the hold keeps it out.
    states = decision.states
    for _ in range(5):
        decision = cycle(states, {A: OK, B: OK}, {A}, held=(B,))
        assert decision.actions == []
        states = decision.states
    # Taken out without a hold: like any other replica, back after M passes.
    for number in range(1, DEFAULT_RECOVER_AFTER + 1):
        decision = cycle(states, {A: OK, B: OK}, {A})
        assert kinds(decision) == ([(ADD, B)] if number == DEFAULT_RECOVER_AFTER else []), number
        states = decision.states


def test_a_replica_put_back_while_still_failing_goes_out_again() -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=FAIL, consecutive_failures=4, removed_by_guard=True),
    }
    decision = cycle(states, {A: OK, B: BAD}, {A, B})
    assert not decision.states[B].removed_by_guard
    assert kinds(decision) == [(REMOVE, B)]
    assert settle(decision)[B].removed_by_guard


# --- Never the last healthy replica


def test_the_last_replica_is_kept_in_with_an_alert() -> None:
    states: dict[str, ReplicaState] = {}
    for _ in range(3):
        decision = cycle(states, {A: BAD}, {A}, replicas=(A,))
        states = settle(decision)
    assert kinds(decision) == [(ALERT, A)]
    assert decision.actions[0].reason == LAST_REPLICA_REASON
    assert "would leave the router with no healthy replica; kept in, alerting" in LAST_REPLICA_REASON
    assert states[A].in_router and not states[A].removed_by_guard
    assert states[A].alerts == 2  # cycles 2 and 3
    assert decision.lines[-1] == f"alert replica={A} failures=3: {LAST_REPLICA_REASON}: {NAN}"


def test_when_every_replica_fails_none_is_removed() -> None:
    states: dict[str, ReplicaState] = {}
    for _ in range(2):
        decision = cycle(states, {A: BAD, B: BAD, C: BAD}, {A, B, C}, replicas=(A, B, C))
        states = settle(decision)
    assert kinds(decision) == [(ALERT, A), (ALERT, B), (ALERT, C)]


def test_several_failing_replicas_go_out_together_while_one_passes() -> None:
    states: dict[str, ReplicaState] = {}
    for _ in range(2):
        decision = cycle(states, {A: BAD, B: BAD, C: OK}, {A, B, C}, replicas=(A, B, C))
        states = settle(decision)
    assert kinds(decision) == [(REMOVE, A), (REMOVE, B)]


@pytest.mark.parametrize(
    ("other", "registered", "held", "why"),
    [
        (ReplicaState(B, verdict=PASS), {A}, (), "the passing replica is not registered"),
        (ReplicaState(B, verdict=PASS, in_router=True), {A, B}, (B,), "the passing replica is held"),
        (ReplicaState(B, verdict=None, in_router=True), {A, B}, (), "the other replica was never checked"),
    ],
)
def test_only_registered_unheld_passing_replicas_count_as_healthy(
    other: ReplicaState, registered: set[str], held: tuple[str, ...], why: str
) -> None:
    states = {A: ReplicaState(A, verdict=FAIL, consecutive_failures=1, in_router=True), B: other}
    decision = cycle(states, {A: BAD}, registered, held)
    assert kinds(decision) == [(ALERT, A)], why


@pytest.mark.parametrize("by_guard", [False, True])
def test_a_replica_being_added_back_does_not_count_as_healthy_yet(by_guard: bool) -> None:
    states = {
        A: ReplicaState(A, verdict=FAIL, consecutive_failures=1, in_router=True),
        B: ReplicaState(B, verdict=PASS, consecutive_passes=2, removed_by_guard=by_guard),
    }
    decision = cycle(states, {A: BAD, B: OK}, {A})
    assert kinds(decision) == [(ALERT, A), (ADD, B)]
    # Next cycle B is in and passing: A can go.
    states = settle(decision)
    assert kinds(cycle(states, {A: BAD, B: OK}, {A, B})) == [(REMOVE, A)]


def test_healthy_replicas() -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=PASS, in_router=True, held=True),
        C: ReplicaState(C, verdict=FAIL, in_router=True),
    }
    assert healthy_replicas(states) == [A]


# --- Holds


def test_a_held_replica_is_neither_removed_nor_added_and_its_streaks_restart() -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=FAIL, consecutive_failures=7, in_router=True, symptom=NAN),
    }
    decision = cycle(states, {A: OK}, {A, B}, held=(B,))
    b = decision.states[B]
    assert (b.verdict, b.held, b.consecutive_failures, b.symptom) == (HELD, True, 0, "")
    assert decision.actions == []
    assert (
        f"verdict replica={B} result=held (a drain marker is set: not probed, not touched)" in decision.lines
    )
    # Released and still bad: K fresh failures before it goes out.
    decision = cycle(decision.states, {A: OK, B: BAD}, {A, B})
    assert not decision.states[B].held and decision.actions == []
    assert kinds(cycle(decision.states, {A: OK, B: BAD}, {A, B})) == [(REMOVE, B)]


@pytest.mark.parametrize("by_guard", [False, True])
def test_a_held_replica_is_not_added_back(by_guard: bool) -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=PASS, consecutive_passes=10, removed_by_guard=by_guard),
    }
    decision = cycle(states, {A: OK, B: OK}, {A}, held=(B,))
    assert decision.actions == []
    # The rolling update will put it back; the guard then lets go.
    assert decision.states[B].removed_by_guard is by_guard


def test_a_held_replica_ignores_a_verdict_passed_for_it() -> None:
    decision = cycle({}, {A: OK, B: BAD}, {A, B}, held=(B,))
    assert decision.states[B].verdict == HELD and decision.states[B].consecutive_failures == 0


# --- Router unreadable, router errors


def test_no_router_listing_means_no_actions_but_verdicts_still_count() -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=FAIL, consecutive_failures=1, in_router=True),
    }
    decision = cycle(states, {A: OK, B: BAD}, None)
    assert decision.actions == []
    assert decision.states[B].consecutive_failures == 2 and decision.states[B].in_router
    # The router answers again: the removal that was held back happens now.
    assert kinds(cycle(decision.states, {A: OK, B: BAD}, {A, B})) == [(REMOVE, B)]


def test_a_failed_router_call_changes_nothing_and_is_retried() -> None:
    states = {
        A: ReplicaState(A, verdict=PASS, in_router=True),
        B: ReplicaState(B, verdict=FAIL, consecutive_failures=1, in_router=True),
    }
    decision = cycle(states, {A: OK, B: BAD}, {A, B})
    after = settle(decision, failed={B: "HTTP 500"})
    assert after[B].in_router and not after[B].removed_by_guard and after[B].transitions_out == 0
    _, lines = apply_outcome(decision.states[B], decision.actions[0], False, "HTTP 500")
    assert lines == [f"error replica={B} could not take it out of the router: HTTP 500"]
    assert kinds(cycle(after, {A: OK, B: BAD}, {A, B})) == [(REMOVE, B)]


def test_apply_outcome_lines_and_effects() -> None:
    state = ReplicaState(B, verdict=FAIL, consecutive_failures=2, in_router=True, symptom=NAN)
    out, lines = apply_outcome(state, Action(REMOVE, B, "x"), True)
    assert lines == [f"transition replica={B} out after 2 failed verdicts: {NAN}"]
    back = ReplicaState(B, verdict=PASS, consecutive_passes=3, removed_by_guard=True, transitions_out=1)
    done, lines = apply_outcome(back, Action(ADD, B, "x"), True)
    assert lines == [f"transition replica={B} in after 3 passed verdicts"]
    assert (done.in_router, done.removed_by_guard, done.transitions_in) == (True, False, 1)
    failed, lines = apply_outcome(back, Action(ADD, B, "x"), False, "connection refused")
    assert failed == back and lines == [
        f"error replica={B} could not put it back into the router: connection refused"
    ]
    assert apply_outcome(state, Action(ALERT, B, "x"), True) == (state, [])
    assert out is not state and state.in_router
    with pytest.raises(ValueError, match="applied to the state of"):
        apply_outcome(state, Action(REMOVE, A, "x"), True)


@pytest.mark.parametrize(("k", "m"), [(0, 3), (2, 0), (True, 3), (2, 1.5)])
def test_bad_thresholds_are_refused(k: object, m: object) -> None:
    with pytest.raises(PolicyError, match="must be an integer of at least 1"):
        decide_cycle({}, {}, set(), set(), k, m)  # type: ignore[arg-type]


# --- States survive a restart


def test_state_round_trips_through_a_dict() -> None:
    state = ReplicaState(
        B,
        verdict=FAIL,
        symptom=NAN,
        last_check=12.5,
        consecutive_failures=3,
        in_router=False,
        removed_by_guard=True,
        transitions_out=2,
        transitions_in=1,
        alerts=4,
    )
    assert ReplicaState.from_dict(state.to_dict()) == state


def test_a_damaged_state_gets_defaults() -> None:
    data = {
        "verdict": "maybe",
        "consecutive_failures": -1,
        "removed_by_guard": "yes",
        "last_check": "x",
        "alerts": 3,
    }
    state = ReplicaState.from_dict(data, url=A)
    assert state == ReplicaState(A, alerts=3)


# --- Journal lines


def test_symptom_from_probes_matches_the_modules_failure_parts() -> None:
    results = [
        ("2+2", True, []),
        ("prime", False, ["finish_reason 'length' (wanted 'stop')", "content is empty"]),
        ("hello", False, []),
    ]
    assert symptom_from_probes(results) == (
        "probe 'prime': finish_reason 'length' (wanted 'stop'); content is empty | probe 'hello': failed"
    )
    assert symptom_from_probes([("2+2", True, [])]) == ""


def test_verdict_line_quotes_and_clips_the_symptom() -> None:
    symptom = 'content "x"\nsecond line ' + "y" * 500
    line = render_verdict(ReplicaState(A, verdict=FAIL, consecutive_failures=1, symptom=symptom))
    assert "\n" not in line
    assert line.startswith(
        f'verdict replica={A} result=fail failures=1 symptom="content \\"x\\" second line yyy'
    )
    assert line.endswith('…"') and len(line) < 400


KEYS = [
    "sk-test-0123456789abcdef",
    "Bearer adm-0123456789",
    "api_key=wk-abcdef0123",
    '"api_key": "wk-abcdef0123"',
    "Authorization: Bearer sk-zzzzzzzzzzzz",
    "password=hunter2hunter2",
]


@pytest.mark.parametrize("key", KEYS)
def test_journal_lines_never_carry_a_key(key: str) -> None:
    symptom = f"HTTP 401 (wanted 200): 'invalid credentials {key} sent'"
    state = ReplicaState(A, verdict=FAIL, consecutive_failures=2, symptom=symptom, in_router=True)
    lines = [
        render_verdict(state),
        render_transition(state, "out"),
        render_alert(state, LAST_REPLICA_REASON),
        label_symptom(symptom),
        *cycle({}, {A: (False, symptom)}, {A, B}, replicas=(A,)).lines,
    ]
    secret = re.split(r"[ =:]+", key.replace('"', ""))[-1]
    for line in lines:
        assert secret not in line, line
        assert "<redacted>" in line, line


def test_scrub_replaces_given_secrets_longest_first() -> None:
    assert scrub("a LONGSECRET b SECRET", ["SECRET", "LONGSECRET"]) == "a <redacted> b <redacted>"
    assert scrub("nothing to hide: 2+2 is 4", ["", "zz"]) == "nothing to hide: 2+2 is 4"


def test_label_symptom_is_one_short_line() -> None:
    label = label_symptom("a\nb" + "c" * 500)
    assert len(label) == LABEL_MAX and "\n" not in label and label.endswith("…")


def test_quote_escapes() -> None:
    assert quote('a"b\\c') == '"a\\"b\\\\c"'


@given(st.text(max_size=400), st.integers(min_value=1, max_value=300))
def test_clip_is_one_line_within_the_limit(text: str, limit: int) -> None:
    clipped = clip(text, limit)
    assert len(clipped) <= limit
    assert not re.search(r"[\x00-\x1f\x7f]", clipped)


NOTHING: frozenset[str] = frozenset()
SOME_REPLICAS = st.frozensets(st.sampled_from([A, B, C]))
STEP = st.tuples(
    st.sampled_from([A, B, C]),  # the replica whose verdict this step sets (the others pass)
    st.booleans(),  # its verdict
    st.one_of(st.just(NOTHING), SOME_REPLICAS),  # held this cycle
    st.one_of(st.just(NOTHING), st.just(NOTHING), SOME_REPLICAS),  # taken out by someone else, just before
    st.sampled_from([False, False, False, True]),  # the router restarted (empty) just before
)


@given(
    st.lists(STEP, min_size=1, max_size=40),
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=1, max_value=4),
)
def test_invariants_over_random_histories(
    history: list[tuple[str, bool, frozenset[str], frozenset[str], bool]], k: int, m: int
) -> None:
    """Whatever the verdicts, holds, removals by others and router restarts: the guard never removes the last
    healthy replica, removes only registered unheld replicas after K failures, and adds a replica exactly when
    it is not registered, not held and passed its last M verdicts, whoever took it out."""
    replicas = (A, B, C)
    states: dict[str, ReplicaState] = {}
    for url, passed, held, taken_out, restarted in history:
        verdicts = {u: OK for u in replicas} | {url: (passed, "" if passed else NAN)}
        registered = {u for u, s in states.items() if s.in_router} if states else set(replicas)
        registered = set() if restarted else registered - taken_out
        decision = cycle(states, verdicts, registered, held, replicas=replicas, k=k, m=m)
        healthy = set(healthy_replicas(decision.states))
        assert healthy <= registered - held
        for action in decision.actions:
            state = decision.states[action.url]
            assert not state.held and action.url not in held
            if action.kind == REMOVE:
                assert state.in_router and state.consecutive_failures >= k
                assert healthy - {action.url}
            if action.kind == ALERT:
                assert state.in_router and state.consecutive_failures >= k
                assert not healthy - {action.url}
            if action.kind == ADD:
                assert action.url not in registered and not state.in_router
                assert state.verdict == PASS and state.consecutive_passes >= m
        # Conversely, every replica that qualifies is added, whoever took it out.
        added = {action.url for action in decision.actions if action.kind == ADD}
        qualified = {
            u
            for u, s in decision.states.items()
            if u not in registered and u not in held and s.consecutive_passes >= m
        }
        assert added == qualified
        states = settle(decision)
