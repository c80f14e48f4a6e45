"""Filters over the whole fleet's host variables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import (
    edge_lines,
    failure_words,
    fleet_summary,
    proven_replicas,
    validation_table,
    validation_verdict,
)
from ansible_collections.glm5.deploy.plugins.module_utils.guard_policy import (
    DEFAULT_MAX_REMOVAL_FRACTION,
    PolicyError,
    gate_plan,
)


def glm5_fleet_summary(hosts: list[str], hostvars: Any) -> list[str]:
    """Per-host table of what was deployed and validated: ``hosts | glm5_fleet_summary(hostvars)``."""
    return fleet_summary(hosts, {h: hostvars[h] for h in hosts})


def glm5_edge_summary(routers: list[str], hostvars: Any) -> list[str]:
    """A line for each router host whose edge speaks plain HTTP, for the end of the fleet summary:
    ``groups['sglang_router'] | glm5_edge_summary(hostvars)``."""
    return edge_lines(routers, {h: hostvars[h] for h in routers})


def glm5_validation_verdict(result: Any) -> str:
    """``sglang_validate_result | glm5_validation_verdict``: ``proven``, ``failed`` or ``not judged`` (no
    result, or skipped: a multi-node replica's rank > 0)."""
    return validation_verdict(result)


def glm5_validation_table(hosts: list[str], hostvars: Any) -> list[str]:
    """Per-node, per-probe table of the inference check: ``hosts | glm5_validation_table(hostvars)``."""
    return validation_table(hosts, {h: hostvars[h] for h in hosts})


def glm5_proven_replicas(hosts: list[str], hostvars: Any) -> list[str]:
    """The hosts whose inference check passed in this run: ``hosts | glm5_proven_replicas(hostvars)``."""
    return proven_replicas(hosts, {h: hostvars[h] for h in hosts})


def glm5_gate_plan(
    hosts: list[str],
    hostvars: Any,
    fleet: Sequence[str] | None = None,
    fraction: float = DEFAULT_MAX_REMOVAL_FRACTION,
) -> dict[str, Any]:
    """The validate gate: ``ansible_play_hosts_all | glm5_gate_plan(hostvars, leaders, fraction)``.

    Each host's router state (``present``, ``absent``, ``unchanged``) and rule, from every host's
    ``sglang_validate_result``, by ``guard_policy.gate_plan`` (the guard's removal policy): ``{hosts: {host:
    {state, rule}}, suspects: [probe], cap, tracked}``. ``fleet``: every replica's rank 0 in the inventory
    (the cap's base; those outside the run count as healthy); default the hosts judged in the run.
    """
    results = {h: hostvars[h].get("sglang_validate_result") for h in hosts}
    judged = [h for h, r in results.items() if isinstance(r, dict) and not r.get("skipped")]
    leaders = list(fleet) if fleet else judged
    outside = [h for h in leaders if h not in results]
    try:
        return gate_plan(results, tracked=max(len(leaders), 1), fraction=fraction, outside=len(outside))
    except PolicyError as exc:
        raise AnsibleFilterError(f"glm5_gate_plan: {exc} (sglang_validate_max_removal_fraction)") from None


def glm5_failure_words(host: str, hostvars: Any, hosts: list[str], routed: bool) -> str:
    """What summary.yml says after a failed node's symptom: where its replica is, and why (the gate's
    rule, a suspect probe, no replica passed):
    ``inventory_hostname | glm5_failure_words(hostvars, hosts, routed)``."""
    return failure_words(host, {h: hostvars[h] for h in hosts}, routed)


class FilterModule:
    """glm5-deploy fleet filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "glm5_edge_summary": glm5_edge_summary,
            "glm5_failure_words": glm5_failure_words,
            "glm5_fleet_summary": glm5_fleet_summary,
            "glm5_gate_plan": glm5_gate_plan,
            "glm5_proven_replicas": glm5_proven_replicas,
            "glm5_validation_verdict": glm5_validation_verdict,
            "glm5_validation_table": glm5_validation_table,
        }
