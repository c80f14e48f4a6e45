"""sglang-guard's Prometheus metrics (glm5_guard_*), every label scrubbed of the secrets.

Part of the guard daemon (sglang_guard.py, which runs the loop); installed beside it."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import guard_policy

# --- Metrics


class Metrics:
    """The ``glm5_guard_*`` Prometheus metrics. prometheus_client is imported here, not at module load."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge

        self.registry = REGISTRY if registry is None else registry

        def gauge(name: str, documentation: str, *labels: str) -> Any:
            return Gauge(name, documentation, labels, registry=self.registry)

        def counter(name: str, documentation: str, *labels: str) -> Any:
            return Counter(name, documentation, labels, registry=self.registry)

        self.verdict = gauge("glm5_guard_verdict", "Last verdict: 1 pass, 0 fail (absent: held)", "replica")
        self.symptom = gauge(
            "glm5_guard_symptom_info",
            "The current failure symptom (failing replicas only)",
            "replica",
            "symptom",
        )
        self.last_check = gauge(
            "glm5_guard_last_check_timestamp_seconds", "Unix time of the last verdict", "replica"
        )
        self.in_router = gauge("glm5_guard_in_router", "1 when the router lists the replica", "replica")
        self.held = gauge("glm5_guard_held", "1 when a drain marker holds the replica", "replica")
        self.removed = gauge("glm5_guard_removed", "1 when the guard took the replica out", "replica")
        self.transitions = counter(
            "glm5_guard_transitions", "Router transitions made by the guard", "replica", "direction"
        )
        self.failures = gauge("glm5_guard_consecutive_failures", "Failed verdicts in a row", "replica")
        self.alerts = counter(
            "glm5_guard_alerts",
            "Removals refused by a rule (never the last healthy replica, the removal cap, a suspect probe)",
            "replica",
        )
        self.kept_in = gauge(
            "glm5_guard_kept_in",
            "1 while a rule keeps a failing replica in the router (last-healthy, removal-cap, suspect-probe)",
            "replica",
            "rule",
        )
        self.removal_cap = gauge("glm5_guard_removal_cap", "Removals allowed per interval (not degenerate)")
        self.healthy = gauge("glm5_guard_healthy_replicas", "Replicas registered and passing")
        self.router_up = gauge("glm5_guard_router_up", "1 when the last router listing was read")
        self.cycle_seconds = gauge("glm5_guard_cycle_seconds", "Duration of the last cycle")
        self.last_cycle = gauge("glm5_guard_last_cycle_timestamp_seconds", "Unix time the last cycle ended")
        self._symptoms: dict[str, str] = {}
        self._kept: dict[str, str] = {}
        self._counted: dict[tuple[str, ...], int] = {}

    def serve(self, host: str, port: int) -> None:
        """Expose the metrics over HTTP (a daemon thread)."""
        from prometheus_client import start_http_server

        start_http_server(port, addr=host, registry=self.registry)

    def _inc_to(self, counter: Any, name: str, labels: tuple[str, ...], total: int) -> None:
        """Raise a counter to ``total`` (the persisted count), so a restart resumes where it stopped."""
        key = (name, *labels)
        done = self._counted.get(key)
        if done is None or total > done:
            counter.labels(*labels).inc(max(total - (done or 0), 0))
            self._counted[key] = max(total, done or 0)

    def update(
        self, states: Mapping[str, guard_policy.ReplicaState], router_up: bool, cap: int | None = None
    ) -> None:
        """Set every per-replica metric from the states, and the fleet-wide gauges."""
        for url, state in states.items():
            if state.verdict in (guard_policy.PASS, guard_policy.FAIL):
                self.verdict.labels(url).set(1 if state.verdict == guard_policy.PASS else 0)
            else:
                _remove(self.verdict, url)
            symptom = (
                guard_policy.label_symptom(state.symptom) if state.verdict == guard_policy.FAIL else None
            )
            old = self._symptoms.get(url)
            if old is not None and old != symptom:
                _remove(self.symptom, url, old)
                del self._symptoms[url]
            if symptom is not None:
                self.symptom.labels(url, symptom).set(1)
                self._symptoms[url] = symptom
            if state.last_check is not None:
                self.last_check.labels(url).set(state.last_check)
            self.in_router.labels(url).set(int(state.in_router))
            self.held.labels(url).set(int(state.held))
            self.removed.labels(url).set(int(state.removed_by_guard))
            self.failures.labels(url).set(state.consecutive_failures)
            self._inc_to(self.transitions, "transitions", (url, "out"), state.transitions_out)
            self._inc_to(self.transitions, "transitions", (url, "in"), state.transitions_in)
            self._inc_to(self.alerts, "alerts", (url,), state.alerts)
            rule = self._kept.get(url)
            if rule is not None and rule != state.kept_by:
                _remove(self.kept_in, url, rule)
                del self._kept[url]
            if state.kept_by:
                self.kept_in.labels(url, state.kept_by).set(1)
                self._kept[url] = state.kept_by
        self.healthy.set(len(guard_policy.healthy_replicas(states)))
        self.router_up.set(int(router_up))
        if cap is not None:
            self.removal_cap.set(cap)

    def cycle_done(self, seconds: float, timestamp: float) -> None:
        """Record the duration of the last check (of a cycle, or of one replica) and when it ended."""
        self.cycle_seconds.set(seconds)
        self.last_cycle.set(timestamp)

    def alive(self, timestamp: float) -> None:
        """A replica's turn (a verdict, or a hold noted) ended at ``timestamp``: the guard is not stuck."""
        self.last_cycle.set(timestamp)


def _remove(metric: Any, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # not exported yet
        metric.remove(*labels)
