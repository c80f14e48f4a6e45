"""Filters for what a run publishes with set_stats (module_utils/run_stats.py), on the controller.

{{ hosts | glm5_fleet_stats(hostvars, endpoint) }}        -> the run's results (site.yml, validate.yml)
{{ inventory_hostname | glm5_rollout_stats(hostvars, outcome) }}  -> one replica's rollout result
"""

from __future__ import annotations

from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.run_stats import fleet_stats, rollout_entry


def glm5_fleet_stats(hosts: list[str], hostvars: Any, endpoint: str = "") -> dict[str, Any]:
    """Per replica verdict, symptom, router, release, evidence; the endpoint, model, checkpoint revision."""
    return fleet_stats(hosts, {h: hostvars[h] for h in hosts}, str(endpoint or ""))


def glm5_rollout_stats(host: str, hostvars: Any, outcome: str) -> dict[str, Any]:
    """``{host: {outcome, verdict, symptom, router, release, ...}}`` for a replica whose batch ended."""
    return rollout_entry(str(host), hostvars[host], str(outcome))


class FilterModule:
    """The run's published results."""

    def filters(self) -> dict[str, Any]:
        return {"glm5_fleet_stats": glm5_fleet_stats, "glm5_rollout_stats": glm5_rollout_stats}
