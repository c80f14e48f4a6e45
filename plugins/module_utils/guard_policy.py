"""What the content guard does with each replica: pure decisions over plain data, standard library only.

The guard daemon (roles/sglang_guard/files/sglang_guard.py) asks every replica the inference-check probes on
each replica's own schedule and judges the answers with :mod:`judge_verdict`, the judge of the
``sglang_inference_check`` module. It hands this module the verdicts as they arrive, the router's worker list
and the drain markers (holds), and gets back the new per-replica states, the router actions to take, and the
journal lines to write. The validate gate (playbooks/validate.yml, filter ``glm5_gate_plan``) asks the same
removal policy what to do with each replica after a run's inference checks (:func:`gate_plan`).
This module does no I/O, knows no keys and never raises on its inputs.

URLs must already be normalized by the caller (stripped, no trailing slash: ``fleet_topology._norm``).

Rules, with their thresholds:

- **Out after K failures.** A replica that is registered in the router (listed and not draining) and not held
  is taken out (``remove``) once its last ``fail_after`` (K, default :data:`DEFAULT_FAIL_AFTER` = 2) verdicts
  in a row failed. One bad answer is not enough: the check is cheap to repeat and a removal costs capacity.
- **Back after M passes, whoever took it out.** A tracked replica (one of ``replicas``: the inventory's) that
  is not registered and not held is put back (``add``) once its last ``recover_after`` (M, default
  :data:`DEFAULT_RECOVER_AFTER` = 3) verdicts in a row passed, whether the guard, a playbook (a replica that
  failed its check at deploy time), an operator or a router restart took it out. The router starts with no
  workers and only Ansible registers them, so a router that restarted outside Ansible comes back empty: this
  rule refills it within M intervals, without waiting for a playbook. It applies from the first cycles after
  the guard starts, too. M > K: coming back needs more evidence than going out, so a flapping replica stays
  out. A hold is the only way to keep a passing replica out (rolling updates, operators).
- **Someone put it back.** ``removed_by_guard`` only records that the guard took the replica out (metric
  ``glm5_guard_removed``); it does not decide whether the replica may come back. When a replica the guard
  removed is registered again by someone else (a playbook put it back), the guard forgets that it removed it
  (``removed_by_guard`` cleared, with a ``note`` line). If it still fails, it goes out again.
- **Holds.** A replica with a drain marker (the rolling update is working on it, or an operator keeps it out
  on purpose) is not probed at all, its verdict is ``held``, its streaks restart from zero (what comes back
  after a restart is a new server), and the guard neither removes nor adds it, however long the hold lasts.
  Held replicas never count as healthy.
- **Never the last one.** A removal that would leave the router with no healthy replica (registered, not
  held, last verdict ``pass``, not reported unhealthy by the router) is not made: the replica stays in and an
  ``alert`` is raised instead, at every verdict while this lasts (so ``glm5_guard_alerts_total`` keeps rising
  while the fleet has no good replica). Re-adds planned in the same decision do not count as healthy: the add
  may fail.
- **The router says its engine stopped: out at once.** The guard reads the router's worker list every
  ``router_poll`` seconds (1 s by default; one ``GET /workers`` whatever the fleet's size). A registered,
  unheld replica the router reports unhealthy (``is_healthy: false``) after having reported it healthy is
  taken out at once, without waiting for K verdicts (a journal ``note`` names the router's health check), and
  its pass streak restarts: smg would re-include it on its own after its health checks pass again, but out of
  the router it comes back only by M passing verdicts, like any other. A worker the router has never reported
  healthy (just registered, still starting) is left alone.
- **One removal policy** (:func:`plan_removals`, shared with the validate gate of playbooks/validate.yml,
  which reads it through :func:`gate_plan`), over the replicas the rules above would take out:

  - *Degenerate answers always go out* (a silent-NaN symptom: degenerate output, a null, NaN, Inf or positive
    logprob, a crash signature; judge_verdict's failure kind ``degenerate``): exempt from the cap, since they
    are never a false positive of a typo. Only "never the last healthy replica" keeps one in.
  - *Suspect probe.* When every replica judged (at least :data:`SUSPECT_MIN_REPLICAS`) fails the same probe
    with sound answers (failure kind ``wrong``: it misses the probe's ``expect``, ``expect_python`` or
    ``finish_reason``), and no replica passed it or failed it degenerate, the probe is suspected (an
    operator's typo), not the replicas: a replica whose only failures are on suspect probes stays in
    (rule ``suspect-probe``, alert). The gate fails the run naming the probe and leaves the router as it was.
  - *The cap.* At most ``max_removal_fraction`` (default :data:`DEFAULT_MAX_REMOVAL_FRACTION` = 0.5, like
    Envoy's panic threshold: past half the fleet gone, the check is more likely wrong than the fleet) of the
    tracked replicas, rounded down and at least 1 (:func:`removal_cap`), are taken out per interval
    (the guard: a sliding window of ``interval`` seconds; the gate: one run). A replica the cap keeps in is
    alerted on (rule ``removal-cap``) and goes out at a later verdict once the window has room.
  - *Never the last one* (rule ``last-healthy``), for every kind of failure.

  A replica kept in by a rule carries it in ``kept_by`` (metric ``glm5_guard_kept_in``) and alerts once per
  verdict (or once when the router's word turns it into a candidate).
- **No router listing, no actions.** When the router could not be read (``registered`` is None), verdicts
  are still counted but nothing is removed, added or alerted; ``in_router`` keeps its last known value. Since
  the thresholds are ``>=``, an action held back by an unreadable router (or a failed router call) is taken
  on the next cycle that can.

The effects of ``remove`` and ``add`` are applied by :func:`apply_outcome` once the router has answered, so
that a failed router call changes nothing and the transition lines are written only for what happened.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field, replace
from typing import Any

DEFAULT_FAIL_AFTER = 2
DEFAULT_RECOVER_AFTER = 3
# Removals that count against the cap in one interval, as a fraction of the tracked replicas (at least one).
DEFAULT_MAX_REMOVAL_FRACTION = 0.5
# Replicas that must fail a probe with sound answers before the probe, not the replicas, is suspected.
SUSPECT_MIN_REPLICAS = 2

# Failure kinds (judge_verdict's, repeated here: this module imports nothing of the project).
DEGENERATE = "degenerate"
BROKEN = "broken"
WRONG = "wrong"
FAILURE_KINDS = (DEGENERATE, BROKEN, WRONG)

PASS = "pass"
FAIL = "fail"
HELD = "held"
VERDICTS = (PASS, FAIL, HELD)

REMOVE = "remove"
ADD = "add"
ALERT = "alert"

LAST_REPLICA_REASON = "would leave the router with no healthy replica; kept in, alerting"
CAP_REASON = "the removal cap is reached ({cap} per interval of {tracked} replicas); kept in, alerting"
SUSPECT_REASON = (
    "every replica judged fails probe {probes} with sound answers: the probe is suspect, not the replica; "
    "kept in, alerting"
)
ROUTER_UNHEALTHY = "router health check failed: the router reports it unhealthy (its engine stopped?)"

# The rules that keep a failing replica in (journal, metrics, fleet summary).
RULE_LAST = "last-healthy"
RULE_CAP = "removal-cap"
RULE_SUSPECT = "suspect-probe"
KEEP_RULES = (RULE_LAST, RULE_CAP, RULE_SUSPECT)

SYMPTOM_MAX = 300  # characters of a symptom in a journal line
LABEL_MAX = 120  # characters of a symptom in a metric label
REDACTED = "<redacted>"

# Key-looking text that a server may echo back in an error (headers, JSON fields, OpenAI-style keys).
_KEY_PATTERNS = (
    (re.compile(r"(?i)\b(bearer)(\s+)[^\s\"'\\,;]+"), rf"\1\2{REDACTED}"),
    (
        re.compile(
            r"(?i)\b(api[_-]?key|admin[_-]?key|authorization|x-api-key|token|secret|password)"
            r"([\"']?\s*[:=]\s*[\"']?)(?!bearer\b)[^\s\"'\\,;}]+"
        ),
        rf"\1\2{REDACTED}",
    ),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), f"sk-{REDACTED}"),
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class PolicyError(ValueError):
    """Invalid thresholds."""


@dataclass
class ReplicaState:
    """What the guard knows about one replica, carried from cycle to cycle (and across restarts)."""

    url: str
    verdict: str | None = None  # pass, fail, held, or None before the first check
    symptom: str = ""  # why the last verdict failed; empty otherwise
    last_check: float | None = None  # wall-clock time of the last verdict (held ones excluded)
    consecutive_failures: int = 0
    consecutive_passes: int = 0
    in_router: bool = False  # registered in the router's last readable listing (not draining)
    removed_by_guard: bool = False  # the guard took it out, nobody put it back since (reported, not a gate)
    held: bool = False  # a drain marker is set for it
    transitions_out: int = 0
    transitions_in: int = 0
    alerts: int = 0
    failed_probes: dict[str, str] = field(default_factory=dict)  # failed probe -> failure kind (last verdict)
    unprobed: bool = False  # the last check failed before any probe was judged (no model, no connection)
    router_unhealthy: bool = False  # the router reports it unhealthy after having reported it healthy
    kept_by: str = ""  # the rule that keeps it in although it qualifies for removal (KEEP_RULES), or ""

    @property
    def judgement(self) -> Judgement | None:
        """The last verdict as the removal policy reads it; None when there is no pass or fail verdict."""
        if self.verdict == PASS:
            return Judgement(True)
        if self.verdict == FAIL:
            return Judgement(
                False, dict(self.failed_probes), BROKEN if self.unprobed else None, not self.unprobed
            )
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], url: str | None = None) -> ReplicaState:
        """Rebuild a state from :meth:`to_dict` output; wrongly typed or missing fields get their defaults."""
        state = cls(url=str(url if url is not None else data.get("url", "")))
        defaults = cls(url=state.url)
        for name, default in asdict(defaults).items():
            if name == "url" or name not in data:
                continue
            value = data[name]
            if name == "verdict":
                state.verdict = value if value in VERDICTS else None
            elif name == "symptom":
                state.symptom = value if isinstance(value, str) else ""
            elif name == "last_check":
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
                state.last_check = float(value) if ok else None
            elif name == "failed_probes":
                ok = isinstance(value, Mapping)
                state.failed_probes = (
                    {str(k): v for k, v in value.items() if v in FAILURE_KINDS} if ok else {}
                )
            elif name == "kept_by":
                state.kept_by = value if value in KEEP_RULES else ""
            elif isinstance(default, bool):
                setattr(state, name, value if isinstance(value, bool) else default)
            elif isinstance(default, int):
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
                setattr(state, name, value if ok else default)
        return state


@dataclass(frozen=True)
class Judgement:
    """One replica's check as the removal policy reads it.

    ``failed``: each failed probe and its failure kind (``degenerate``, ``broken``, ``wrong``: judge_verdict).
    ``other``: the kind of a failure tied to no probe (the check failed before the probes, a journal finding),
    or None. ``probed``: the probes were asked and judged (False when the check failed before them).
    """

    passed: bool
    failed: Mapping[str, str] = field(default_factory=dict)
    other: str | None = None
    probed: bool = True

    @property
    def degenerate(self) -> bool:
        """A silent-NaN symptom in any answer: never the fault of a probe, so never capped."""
        return DEGENERATE in (*self.failed.values(), self.other)

    @classmethod
    def from_probes(
        cls, passed: bool, probes: Iterable[Mapping[str, Any]], other: str | None = None
    ) -> Judgement:
        """From per-probe results (the module's or the guard's: ``name``, ``passed``, ``failure_kind``); a
        failed result without a kind counts as ``broken``. No probe results and not passed: not probed."""
        results = list(probes)
        failed = {
            str(r.get("name")): (r.get("failure_kind") if r.get("failure_kind") in FAILURE_KINDS else BROKEN)
            for r in results
            if not r.get("passed")
        }
        probed = bool(results)
        if not passed and not failed and other is None:
            other = BROKEN
        return cls(passed, failed, other, probed)


@dataclass(frozen=True)
class Action:
    """Something to do about a replica: ``remove`` or ``add`` it at the router, or ``alert``.

    ``capped``: a removal that counts against the removal cap (every one but a degenerate replica's)."""

    kind: str
    url: str
    reason: str
    capped: bool = True


@dataclass
class CycleDecision:
    """The outcome of :func:`decide_cycle`: states before any router call, actions, journal lines."""

    states: dict[str, ReplicaState]
    actions: list[Action] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


# --- Text


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every given secret and every key-looking string (Bearer tokens, ``api_key=...``,
    ``sk-...``) replaced by ``<redacted>``. Secrets are replaced longest first, so one cannot hide another."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern, replacement in _KEY_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters of one line: control characters become spaces, a cut ends with …."""
    flat = _CONTROL.sub(" ", text)
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


def quote(text: str, limit: int = SYMPTOM_MAX) -> str:
    """``text`` scrubbed, clipped and double-quoted for a ``key="value"`` journal field."""
    body = clip(scrub(text), limit).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{body}"'


def label_symptom(symptom: str) -> str:
    """The symptom as a metric label value: scrubbed, one line, at most :data:`LABEL_MAX` characters."""
    return clip(scrub(symptom), LABEL_MAX)


def symptom_from_probes(results: Iterable[tuple[str, bool, Sequence[str]]]) -> str:
    """One line naming each failed probe and its failures, as the module's failure message does:
    ``probe 'NAME': failure; failure | probe 'NAME': ...``. Empty when every probe passed."""
    parts = [
        f"probe '{name}': {'; '.join(failures) or 'failed'}"
        for name, passed, failures in results
        if not passed
    ]
    return " | ".join(parts)


# --- Journal lines (one line each; keys scrubbed)


def render_verdict(state: ReplicaState) -> str:
    """``verdict replica=URL result=pass passes=N``, ``... result=fail failures=N symptom="..."``, or
    ``... result=held``."""
    head = f"verdict replica={state.url} result={state.verdict or 'none'}"
    if state.verdict == PASS:
        return f"{head} passes={state.consecutive_passes}"
    if state.verdict == FAIL:
        return f"{head} failures={state.consecutive_failures} symptom={quote(state.symptom)}"
    if state.verdict == HELD:
        return f"{head} (a drain marker is set: not probed, not touched)"
    return head


def render_transition(state: ReplicaState, direction: str) -> str:
    """``transition replica=URL out after N failed verdicts: SYMPTOM`` (direction ``out``; ``... out at once:
    router health check failed: ...`` on the router's word), or ``transition replica=URL in after N passed
    verdicts``."""
    if direction == "out" and state.router_unhealthy:
        return f"transition replica={state.url} out at once: {ROUTER_UNHEALTHY}"
    if direction == "out":
        symptom = clip(scrub(state.symptom), SYMPTOM_MAX) or "no symptom recorded"
        count = state.consecutive_failures
        return f"transition replica={state.url} out after {count} failed verdicts: {symptom}"
    return f"transition replica={state.url} in after {state.consecutive_passes} passed verdicts"


def render_alert(state: ReplicaState, reason: str) -> str:
    """``alert replica=URL failures=N: REASON: SYMPTOM``."""
    symptom = clip(scrub(state.symptom), SYMPTOM_MAX) or "no symptom recorded"
    return f"alert replica={state.url} failures={state.consecutive_failures}: {reason}: {symptom}"


def render_note(url: str, text: str) -> str:
    """``note replica=URL TEXT``: something the guard noticed and did not act on."""
    return f"note replica={url} {clip(scrub(text), SYMPTOM_MAX)}"


def render_error(url: str, text: str) -> str:
    """``error replica=URL TEXT``: a router call that failed."""
    return f"error replica={url} {clip(scrub(text), SYMPTOM_MAX)}"


# --- The removal policy: the guard's and the validate gate's


def check_fraction(fraction: object) -> None:
    """Raise :class:`PolicyError` unless ``fraction`` is a number above 0 and at most 1."""
    ok = isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
    if not ok or not math.isfinite(fraction) or not 0 < fraction <= 1:
        raise PolicyError(f"max_removal_fraction must be a number above 0 and at most 1, got {fraction!r}")


def removal_cap(tracked: int, fraction: float = DEFAULT_MAX_REMOVAL_FRACTION) -> int:
    """Removals allowed per interval: ``fraction`` of the ``tracked`` replicas, rounded down, at least 1."""
    return max(1, math.floor(fraction * max(tracked, 0) + 1e-9))


def removal_budget(recent: Iterable[float], now: float, window: float, cap: int) -> int:
    """Removals still allowed at ``now``: the ``cap`` minus the capped removals made in the last ``window``
    seconds (``recent``: their times, on the clock of ``now``)."""
    return max(cap - sum(1 for t in recent if now - window < t <= now), 0)


def suspect_probes(judged: Mapping[str, Judgement]) -> list[str]:
    """The probes every replica judged fails with sound answers: the probe, not the replicas, is suspect.

    A probe is suspect when at least :data:`SUSPECT_MIN_REPLICAS` replicas failed it ``wrong`` (a sound answer
    that misses its ``expect``, ``expect_python``, ``finish_reason``, or empty content), no replica that was
    asked it passed it, and none failed it ``degenerate``. A replica that could not be asked (not probed) or
    whose answer to it was ``broken`` (an HTTP error, a timeout) says nothing about the probe. Sorted.
    """
    wrong: dict[str, int] = {}
    cleared: set[str] = set()
    names: set[str] = set()
    for judgement in judged.values():
        names.update(judgement.failed)
    for judgement in judged.values():
        if not judgement.probed:
            continue
        for name in names:
            kind = judgement.failed.get(name)
            if kind is None or kind == DEGENERATE:
                cleared.add(name)  # passed it, or a NaN symptom: not a typo
            elif kind == WRONG:
                wrong[name] = wrong.get(name, 0) + 1
    return sorted(n for n, count in wrong.items() if count >= SUSPECT_MIN_REPLICAS and n not in cleared)


def only_suspect(judgement: Judgement, suspects: Collection[str]) -> bool:
    """Whether every failure of a failed check is a ``wrong`` answer to a suspect probe."""
    return (
        not judgement.passed
        and judgement.other is None
        and bool(judgement.failed)
        and all(kind == WRONG and name in suspects for name, kind in judgement.failed.items())
    )


@dataclass
class RemovalPlan:
    """The outcome of :func:`plan_removals`: who goes out, who is kept in by which rule."""

    remove: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # url -> RULE_*
    capped: set[str] = field(default_factory=set)  # removals that count against the cap
    budget_left: int | None = None


def plan_removals(
    candidates: Sequence[tuple[str, Judgement | None]],
    healthy: AbstractSet[str],
    suspects: Collection[str] = (),
    budget: int | None = None,
) -> RemovalPlan:
    """The one removal policy of the guard and of the validate gate (playbooks/validate.yml).

    ``candidates``: the replicas that qualify for removal, in order, each with its judgement (None: it is no
    content verdict, e.g. the router reports its engine stopped). ``healthy``: the replicas that count as
    healthy (in the router, not held, passing). ``suspects``: :func:`suspect_probes`. ``budget``: capped
    removals still allowed in this interval (None: no cap). Rules, for each candidate, degenerate ones first:

    1. **Suspect probe.** A replica whose every failure is a ``wrong`` answer to a suspect probe is kept in
       (:data:`RULE_SUSPECT`), and counts as healthy for rule 2: it answers everything else soundly.
    2. **Never the last healthy replica.** A removal that would leave no healthy replica is not made
       (:data:`RULE_LAST`), degenerate or not.
    3. **The cap.** Each removal of a replica that is not degenerate uses one of ``budget``; with none left
       it is kept in (:data:`RULE_CAP`). Degenerate answers are exempt: a NaN is never a false positive of a
       typo, and a poisoned replica serves garbage to every request it gets.
    """
    plan = RemovalPlan(budget_left=budget)
    ordered = [c for c in candidates if c[1] is not None and c[1].degenerate]
    ordered += [c for c in candidates if c not in ordered]
    kept_suspect = {url for url, j in ordered if j is not None and only_suspect(j, suspects)}
    counted = set(healthy) | kept_suspect
    for url, judgement in ordered:
        degenerate = judgement is not None and judgement.degenerate
        if url in kept_suspect:
            plan.kept[url] = RULE_SUSPECT
        elif not counted - {url}:
            plan.kept[url] = RULE_LAST
        elif not degenerate and plan.budget_left is not None and plan.budget_left <= 0:
            plan.kept[url] = RULE_CAP
        else:
            plan.remove.append(url)
            if not degenerate:
                plan.capped.add(url)
                if plan.budget_left is not None:
                    plan.budget_left -= 1
    return plan


def keep_reason(rule: str, suspects: Sequence[str] = (), cap: int = 0, tracked: int = 0) -> str:
    """The words of an ``alert`` for a replica kept in by ``rule``."""
    if rule == RULE_CAP:
        return CAP_REASON.format(cap=cap, tracked=tracked)
    if rule == RULE_SUSPECT:
        return SUSPECT_REASON.format(probes=", ".join(f"'{name}'" for name in suspects))
    return LAST_REPLICA_REASON


# --- The validate gate (playbooks/validate.yml)

GATE_PRESENT = "present"
GATE_ABSENT = "absent"
GATE_UNCHANGED = "unchanged"
RULE_PASSED = "passed"
RULE_FAILED = "failed"
RULE_DEGENERATE = "degenerate"
RULE_NOT_JUDGED = "not judged"


def judgement_of_result(result: Mapping[str, Any] | None) -> Judgement | None:
    """The judgement of an ``sglang_inference_check`` result; None when it did not judge (absent, skipped:
    a multi-node replica's rank > 0, or a run without the check). A failed journal scan is a ``broken``
    failure tied to no probe."""
    if not isinstance(result, Mapping) or result.get("skipped") or "passed" not in result:
        return None
    journal = result.get("journal")
    other = BROKEN if isinstance(journal, Mapping) and not journal.get("passed", True) else None
    probes = [p for p in result.get("probes") or [] if isinstance(p, Mapping)]
    return Judgement.from_probes(bool(result.get("passed")), probes, other)


def gate_plan(
    results: Mapping[str, Mapping[str, Any] | None],
    tracked: int,
    fraction: float = DEFAULT_MAX_REMOVAL_FRACTION,
    outside: int = 0,
) -> dict[str, Any]:
    """What the validate gate does with each host's replica, by :func:`plan_removals`.

    ``results``: each host of the run and its ``sglang_validate_result`` (None or skipped: not judged, e.g. a
    multi-node replica's rank > 0). ``tracked``: the replicas of the fleet (the cap's base). ``outside``: the
    fleet's replicas this run did not judge (``--limit``): the run leaves them as they are and counts them as
    healthy, since the guard keeps judging them.

    Returns ``{"hosts": {host: {"state", "rule"}}, "suspects": [probe], "cap": n, "tracked": n}``; ``state``
    is ``present`` (passed), ``absent`` (taken out: rule ``failed`` or ``degenerate``) or ``unchanged`` (not
    judged, or kept by a rule: ``suspect-probe``, ``last-healthy``, ``removal-cap``). The router is left as it
    was for every replica that failed only a suspect probe; the run must fail naming the probe.
    """
    check_fraction(fraction)
    judged = {
        host: j for host, j in ((h, judgement_of_result(r)) for h, r in results.items()) if j is not None
    }
    suspects = suspect_probes(judged)
    healthy = {host for host, j in judged.items() if j.passed}
    if outside > 0:
        healthy.add("\0outside")  # never a host name
    cap = removal_cap(tracked, fraction)
    failing = [(host, j) for host, j in judged.items() if not j.passed]
    plan = plan_removals(failing, healthy, suspects, cap)
    hosts: dict[str, dict[str, str]] = {}
    for host in results:
        judgement = judged.get(host)
        if judgement is None:
            hosts[host] = {"state": GATE_UNCHANGED, "rule": RULE_NOT_JUDGED}
        elif judgement.passed:
            hosts[host] = {"state": GATE_PRESENT, "rule": RULE_PASSED}
        elif host in plan.kept:
            hosts[host] = {"state": GATE_UNCHANGED, "rule": plan.kept[host]}
        else:
            rule = RULE_DEGENERATE if judgement.degenerate else RULE_FAILED
            hosts[host] = {"state": GATE_ABSENT, "rule": rule}
    return {"hosts": hosts, "suspects": suspects, "cap": cap, "tracked": tracked}


# --- Decisions


def check_thresholds(fail_after: int, recover_after: int) -> None:
    """Raise :class:`PolicyError` unless both thresholds are integers of at least 1."""
    for name, value in (("fail_after", fail_after), ("recover_after", recover_after)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PolicyError(f"{name} must be an integer of at least 1, got {value!r}")


def healthy_replicas(states: Mapping[str, ReplicaState]) -> list[str]:
    """URLs that are registered, not held, whose last verdict passed, and that the router does not report
    unhealthy."""
    return [
        url
        for url, s in states.items()
        if s.in_router and not s.held and s.verdict == PASS and not s.router_unhealthy
    ]


def decide_cycle(
    previous: Mapping[str, ReplicaState],
    verdicts: Mapping[str, tuple[bool, str] | tuple[bool, str, Judgement]],
    registered: AbstractSet[str] | None,
    held: AbstractSet[str],
    fail_after: int = DEFAULT_FAIL_AFTER,
    recover_after: int = DEFAULT_RECOVER_AFTER,
    *,
    now: float | None = None,
    replicas: Sequence[str] | None = None,
    budget: int | None = None,
    cap: int = 0,
    unhealthy: AbstractSet[str] = frozenset(),
    fresh: AbstractSet[str] | None = None,
) -> CycleDecision:
    """One decision under the rules in the module docstring: a cycle of every replica, or the verdicts that
    just arrived.

    ``previous``: the states so far (not modified). ``verdicts``: the new ``{url: (passed, symptom)}`` or
    ``{url: (passed, symptom, judgement)}`` (the judgement feeds the removal policy: degenerate answers,
    suspect probes; without one a failure counts as ``broken``). ``registered``: the URLs the router lists and
    is not draining, or None when the router could not be read. ``held``: URLs with a drain marker.
    ``replicas``: the replicas to track, in order (default: those of ``previous``, then of ``verdicts``).
    ``now``: the wall-clock time stamped on new verdicts. ``budget``: capped removals still allowed in this
    interval (None: no cap), ``cap`` the cap itself (for the alert's words). ``unhealthy``: registered
    replicas the router reports unhealthy after having reported them healthy (the fast path: out at once,
    back only after M passes). ``fresh``: the replicas that may be acted on now (default: all); the guard
    passes those whose verdict just arrived, so each replica is decided on its own schedule, and a kept-in
    replica alerts once per verdict.

    Returns the new states (``remove``/``add`` not yet applied: see :func:`apply_outcome`), the actions in
    replica order, and the journal lines (verdicts, notes, alerts).
    """
    check_thresholds(fail_after, recover_after)
    order = list(dict.fromkeys(replicas if replicas is not None else [*previous, *verdicts]))
    states: dict[str, ReplicaState] = {}
    lines: list[str] = []
    newly_unhealthy: set[str] = set()

    for url in order:
        state = replace(previous[url]) if url in previous else ReplicaState(url=url)
        state.failed_probes = dict(state.failed_probes)
        if registered is not None:
            state.in_router = url in registered
            if state.removed_by_guard and state.in_router:
                state.removed_by_guard = False
                lines.append(
                    render_note(
                        url,
                        "is back in the router and the guard did not put it there: "
                        "no longer counted as taken out by the guard",
                    )
                )
            sick = url in unhealthy and state.in_router and url not in held
            if sick and not state.router_unhealthy:
                newly_unhealthy.add(url)
                state.consecutive_passes = 0  # back only after M fresh passes, as any replica taken out
                lines.append(render_note(url, f"{ROUTER_UNHEALTHY}: taking it out at once"))
            state.router_unhealthy = sick
        was_held, state.held = state.held, url in held
        if state.held:
            state.verdict = HELD
            state.symptom = ""
            state.consecutive_failures = state.consecutive_passes = 0
            state.failed_probes, state.unprobed, state.kept_by = {}, False, ""
            if not was_held or fresh is None or url in fresh:  # once per interval, not at every decision
                lines.append(render_verdict(state))
        elif url in verdicts:
            passed, symptom, *rest = verdicts[url]
            judgement = rest[0] if rest else Judgement(passed, {}, None if passed else BROKEN, passed)
            state.last_check = now
            if passed:
                state.verdict, state.symptom = PASS, ""
                state.consecutive_passes += 1
                state.consecutive_failures = 0
                state.failed_probes, state.unprobed = {}, False
            else:
                state.verdict, state.symptom = FAIL, symptom or "failed (no symptom recorded)"
                state.consecutive_failures += 1
                state.consecutive_passes = 0
                state.failed_probes = dict(judgement.failed)
                state.unprobed = not judgement.probed
            lines.append(render_verdict(state))
        states[url] = state

    actions: list[Action] = []
    if registered is None:
        return CycleDecision(states, actions, lines)

    acting = set(order) if fresh is None else set(fresh)
    candidates: list[tuple[str, Judgement | None]] = []
    for url, state in states.items():
        if state.held or not state.in_router:
            state.kept_by = ""
            continue
        failing = state.verdict == FAIL and state.consecutive_failures >= fail_after
        if state.router_unhealthy:
            candidates.append((url, state.judgement if failing else None))
        elif failing and url in acting:
            candidates.append((url, state.judgement))
        elif not failing:
            state.kept_by = ""
    judged = {url: j for url, s in states.items() if not s.held and (j := s.judgement) is not None}
    suspects = suspect_probes(judged)
    plan = plan_removals(candidates, set(healthy_replicas(states)), suspects, budget)
    tracked = len(order)

    for url, state in states.items():
        if url in plan.remove:
            if state.router_unhealthy:
                reason = ROUTER_UNHEALTHY
            else:
                symptom = clip(scrub(state.symptom), SYMPTOM_MAX)
                reason = f"{state.consecutive_failures} failed verdicts: {symptom}"
            actions.append(Action(REMOVE, url, reason, url in plan.capped))
            state.kept_by = ""
        elif url in plan.kept:
            rule = plan.kept[url]
            reason = keep_reason(rule, suspects, cap, tracked)
            # Once per verdict (and once when the router's health turns), not at every decision in between.
            if url in acting or url in newly_unhealthy or state.kept_by != rule:
                state.alerts += 1
                actions.append(Action(ALERT, url, reason))
                lines.append(render_alert(state, reason))
            state.kept_by = rule
        elif (
            url in acting
            and not state.held
            and not state.in_router
            and state.verdict == PASS
            and state.consecutive_passes >= recover_after
        ):
            # Whoever took it out (the guard, a playbook, an operator, a router restart, the router's health
            # check): only a hold keeps a passing replica out, and held replicas were skipped above.
            actions.append(Action(ADD, url, f"{state.consecutive_passes} passed verdicts"))
    return CycleDecision(states, actions, lines)


def apply_outcome(
    state: ReplicaState, action: Action, ok: bool, detail: str = ""
) -> tuple[ReplicaState, list[str]]:
    """The state after the router answered ``action`` (``ok``: it was done), and the journal lines.

    A done ``remove`` marks the replica out of the router and taken out by the guard; a done ``add`` marks it
    back in. A failed call changes nothing but writes an ``error`` line, so the next cycle tries again. An
    ``alert`` involves no router call and changes nothing here.
    """
    if action.url != state.url:
        raise ValueError(f"action for {action.url} applied to the state of {state.url}")
    new = replace(state)
    if action.kind == REMOVE:
        if not ok:
            return new, [
                render_error(state.url, f"could not take it out of the router: {detail or 'failed'}")
            ]
        new.in_router = False
        new.removed_by_guard = True
        new.transitions_out += 1
        return new, [render_transition(new, "out")]
    if action.kind == ADD:
        if not ok:
            return new, [
                render_error(state.url, f"could not put it back into the router: {detail or 'failed'}")
            ]
        new.in_router = True
        new.removed_by_guard = False
        new.transitions_in += 1
        return new, [render_transition(new, "in")]
    return new, []
