"""Judging a service's start while it comes up: healthy, in a crash loop, or still coming up.

Pure functions over what systemd says of the unit (``systemctl show -p
ActiveState,SubState,NRestarts,Result``) and the health endpoint's HTTP status; the sglang_health_wait module
reads both on the node.

systemd counts automatic restarts until ``reset-failed``, and a restart by hand does not zero the count, so
only the restarts since this run (re)started the service say what this start did (``restarts_before``, read
before the start; 0 when the unit was failed, since the role clears that with ``reset-failed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HEALTHY = "healthy"
CRASH_LOOP = "crash-loop"
WAITING = "waiting"

SHOW_PROPERTIES = ("ActiveState", "SubState", "NRestarts", "Result")


def restarts_since(state: Mapping[str, Any], restarts_before: int) -> int:
    """The automatic restarts systemd made since this run (re)started the service."""
    try:
        restarts = int(state.get("NRestarts") or 0)
    except (TypeError, ValueError):
        restarts = 0
    return max(restarts - int(restarts_before), 0)


def start_verdict(
    http_status: int | None, state: Mapping[str, Any], restarts_before: int, crash_restarts: int
) -> str:
    """HEALTHY on a 200; CRASH_LOOP once systemd gave up on the unit (start limit hit, or failed with no
    restart to come) or restarted it ``crash_restarts`` times since this run started it; else WAITING."""
    if http_status == 200:
        return HEALTHY
    if state.get("Result") == "start-limit-hit" or state.get("ActiveState") == "failed":
        return CRASH_LOOP
    if crash_restarts > 0 and restarts_since(state, restarts_before) >= crash_restarts:
        return CRASH_LOOP
    return WAITING


def symptom(state: Mapping[str, Any], restarts_before: int) -> str:
    """What the unit's state says about a start that did not become healthy, in words for the operator."""
    restarts = restarts_since(state, restarts_before)
    active, sub, result = state.get("ActiveState", ""), state.get("SubState", ""), state.get("Result", "")
    if result == "start-limit-hit" or (active == "failed" and restarts > 0):
        return (
            f"a crash loop: systemd restarted it {restarts} times and then gave up (start limit hit); "
            f"the service is {active}."
        )
    if restarts > 0 or active != "active":
        return f"a crash loop: the service is {active}/{sub} after {restarts} restart(s) (result {result})."
    return (
        "a stalled start: the service is running without restarts but never became healthy (a hung "
        "checkpoint read, a multi-node rendezvous that never completes, or a load slower than the timeout)."
    )


def fail_stop_line(lines: list[str], pattern: str, limit: int = 300) -> str | None:
    """The first journal line that holds the engine's NaN fail-stop pattern (a plain substring), clipped."""
    if not pattern:
        return None
    for line in lines:
        if pattern in line:
            return line.strip()[:limit]
    return None


def fail_stop_symptom(line: str) -> str:
    """The symptom of a start that ended on the engine's NaN fail-stop."""
    return (
        "the engine stopped at its first NaN (the NaN fail-stop; docs/serving.md 'Fail-stop on NaN'): the "
        f"model computes NaN logits on this node, so it serves nothing instead of garbage. Journal: {line}"
    )
