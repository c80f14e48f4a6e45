"""What the content guard does with each replica: pure decisions over plain data, standard library only.

The guard daemon (roles/sglang_guard/files/sglang_guard.py) asks every replica the inference-check probes on a
schedule and judges the answers with :mod:`judge_verdict`, the judge of the ``sglang_inference_check``
module. It hands this module one verdict per replica and cycle, the router's worker list and the drain markers
(holds), and gets back the new per-replica states, the router actions to take, and the journal lines to write.
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
  held, last verdict ``pass``) is not made: the replica stays in and an ``alert`` is raised instead, on every
  cycle while this lasts (so ``glm5_guard_alerts_total`` keeps rising while the fleet has no good replica).
  Re-adds planned in the same cycle do not count as healthy: the add may fail.
- **No router listing, no actions.** When the router could not be read (``registered`` is None), verdicts
  are still counted but nothing is removed, added or alerted; ``in_router`` keeps its last known value. Since
  the thresholds are ``>=``, an action held back by an unreadable router (or a failed router call) is taken
  on the next cycle that can.

The effects of ``remove`` and ``add`` are applied by :func:`apply_outcome` once the router has answered, so
that a failed router call changes nothing and the transition lines are written only for what happened.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field, replace
from typing import Any

DEFAULT_FAIL_AFTER = 2
DEFAULT_RECOVER_AFTER = 3

PASS = "pass"
FAIL = "fail"
HELD = "held"
VERDICTS = (PASS, FAIL, HELD)

REMOVE = "remove"
ADD = "add"
ALERT = "alert"

LAST_REPLICA_REASON = "would leave the router with no healthy replica; kept in, alerting"

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
            elif isinstance(default, bool):
                setattr(state, name, value if isinstance(value, bool) else default)
            elif isinstance(default, int):
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
                setattr(state, name, value if ok else default)
        return state


@dataclass(frozen=True)
class Action:
    """Something to do about a replica: ``remove`` or ``add`` it at the router, or ``alert``."""

    kind: str
    url: str
    reason: str


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
    """``transition replica=URL out after N failed verdicts: SYMPTOM`` (direction ``out``), or
    ``transition replica=URL in after N passed verdicts``."""
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


# --- Decisions


def check_thresholds(fail_after: int, recover_after: int) -> None:
    """Raise :class:`PolicyError` unless both thresholds are integers of at least 1."""
    for name, value in (("fail_after", fail_after), ("recover_after", recover_after)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PolicyError(f"{name} must be an integer of at least 1, got {value!r}")


def healthy_replicas(states: Mapping[str, ReplicaState]) -> list[str]:
    """URLs that are registered, not held, and whose last verdict passed."""
    return [url for url, s in states.items() if s.in_router and not s.held and s.verdict == PASS]


def decide_cycle(
    previous: Mapping[str, ReplicaState],
    verdicts: Mapping[str, tuple[bool, str]],
    registered: AbstractSet[str] | None,
    held: AbstractSet[str],
    fail_after: int = DEFAULT_FAIL_AFTER,
    recover_after: int = DEFAULT_RECOVER_AFTER,
    *,
    now: float | None = None,
    replicas: Sequence[str] | None = None,
) -> CycleDecision:
    """One cycle of the rules in the module docstring.

    ``previous``: the states after the last cycle (not modified). ``verdicts``: this cycle's ``{url: (passed,
    symptom)}`` for the replicas that were probed. ``registered``: the URLs the router lists and is not
    draining, or None when the router could not be read. ``held``: URLs with a drain marker. ``replicas``:
    the replicas to track, in order (default: those of ``previous``, then of ``verdicts``). ``now``: the
    wall-clock time stamped on new verdicts.

    Returns the new states (``remove``/``add`` not yet applied: see :func:`apply_outcome`), the actions in
    replica order, and the journal lines (verdicts, notes, alerts).
    """
    check_thresholds(fail_after, recover_after)
    order = list(dict.fromkeys(replicas if replicas is not None else [*previous, *verdicts]))
    states: dict[str, ReplicaState] = {}
    lines: list[str] = []

    for url in order:
        state = replace(previous[url]) if url in previous else ReplicaState(url=url)
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
        state.held = url in held
        if state.held:
            state.verdict = HELD
            state.symptom = ""
            state.consecutive_failures = state.consecutive_passes = 0
            lines.append(render_verdict(state))
        elif url in verdicts:
            passed, symptom = verdicts[url]
            state.last_check = now
            if passed:
                state.verdict, state.symptom = PASS, ""
                state.consecutive_passes += 1
                state.consecutive_failures = 0
            else:
                state.verdict, state.symptom = FAIL, symptom or "failed (no symptom recorded)"
                state.consecutive_failures += 1
                state.consecutive_passes = 0
            lines.append(render_verdict(state))
        states[url] = state

    actions: list[Action] = []
    if registered is None:
        return CycleDecision(states, actions, lines)

    healthy = set(healthy_replicas(states))
    for url, state in states.items():
        if state.held:
            continue
        if state.in_router and state.verdict == FAIL and state.consecutive_failures >= fail_after:
            if healthy - {url}:
                reason = (
                    f"{state.consecutive_failures} failed verdicts: {clip(scrub(state.symptom), SYMPTOM_MAX)}"
                )
                actions.append(Action(REMOVE, url, reason))
            else:
                state.alerts += 1
                actions.append(Action(ALERT, url, LAST_REPLICA_REASON))
                lines.append(render_alert(state, LAST_REPLICA_REASON))
        elif not state.in_router and state.verdict == PASS and state.consecutive_passes >= recover_after:
            # Whoever took it out (the guard, a playbook, an operator, a router restart): only a hold keeps
            # a passing replica out, and held replicas were skipped above.
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
