"""Filters over the whole fleet's host variables."""

from __future__ import annotations

from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import (
    fleet_summary,
    proven_replicas,
    validation_table,
)


def glm5_fleet_summary(hosts: list[str], hostvars: Any) -> list[str]:
    """Per-host table of what was deployed and validated: ``hosts | glm5_fleet_summary(hostvars)``."""
    return fleet_summary(hosts, {h: hostvars[h] for h in hosts})


def glm5_validation_table(hosts: list[str], hostvars: Any) -> list[str]:
    """Per-node, per-probe table of the inference check: ``hosts | glm5_validation_table(hostvars)``."""
    return validation_table(hosts, {h: hostvars[h] for h in hosts})


def glm5_proven_replicas(hosts: list[str], hostvars: Any) -> list[str]:
    """The hosts whose inference check passed in this run: ``hosts | glm5_proven_replicas(hostvars)``."""
    return proven_replicas(hosts, {h: hostvars[h] for h in hosts})


class FilterModule:
    """glm5-deploy fleet filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "glm5_fleet_summary": glm5_fleet_summary,
            "glm5_proven_replicas": glm5_proven_replicas,
            "glm5_validation_table": glm5_validation_table,
        }
