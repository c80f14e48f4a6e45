"""Filters for the sglang_monitoring role.

{{ hostvars | sglang_monitoring_targets(nodes, routers, dcgm_port, dcgm) }}
    -> {job: [file_sd target group, ...] or None}: glm5-sglang, glm5-router, glm5-guard, glm5-dcgm

Logic: module_utils/monitoring_targets.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.monitoring_targets import scrape_targets


def sglang_monitoring_targets(
    hostvars: Any, nodes: Sequence[str], routers: Sequence[str], dcgm_port: int = 9400, dcgm: bool = False
) -> dict[str, Any]:
    """The scrape jobs' target lists, from the nodes' and router hosts' own variables."""
    return scrape_targets(
        hostvars, [str(h) for h in nodes], [str(h) for h in routers], int(dcgm_port), bool(dcgm)
    )


class FilterModule:
    """sglang_monitoring's filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sglang_monitoring_targets": sglang_monitoring_targets}
