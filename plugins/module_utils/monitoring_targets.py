"""Prometheus file_sd target lists for the fleet's scrape jobs (pure functions over the hosts' variables).

One target group per host, with a ``host`` label (the inventory name, which the alerts print). A node is
scraped at the address and port the router reaches it at (fleet_topology.replica_url's rules), over https when
it has a TLS certificate; the router host's smg and guard at its ansible_host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import (
    node_address,
    node_scheme,
    role_default,
)


def target_group(address: str, port: Any, host: str, scheme: str = "http") -> dict[str, Any]:
    """One file_sd target group: ``address:port``, labelled with the inventory name (and the scheme if not
    http)."""
    labels: dict[str, str] = {"host": host}
    if scheme != "http":
        labels["__scheme__"] = scheme
    return {"targets": [f"{address}:{port}"], "labels": labels}


def scrape_targets(
    hostvars: Mapping[str, Mapping[str, Any]],
    nodes: Sequence[str],
    routers: Sequence[str],
    dcgm_port: int = 0,
    dcgm: bool = False,
) -> dict[str, list[dict[str, Any]] | None]:
    """Each job's target list: glm5-sglang (every node's server), glm5-router (smg's metrics listener on each
    router host), glm5-guard (the guard beside it) and glm5-dcgm (NVIDIA's dcgm-exporter on every node at
    ``dcgm_port``; None when ``dcgm`` is off, so its file is removed)."""
    node_vars = {h: hostvars[h] for h in nodes}
    router_vars = {h: hostvars[h] for h in routers}
    return {
        "glm5-sglang": [
            target_group(node_address(v, h), role_default(v, "sglang_server_port"), h, node_scheme(v))
            for h, v in node_vars.items()
        ],
        "glm5-router": [
            target_group(str(v.get("ansible_host") or h), role_default(v, "sglang_router_metrics_port"), h)
            for h, v in router_vars.items()
        ],
        "glm5-guard": [
            target_group(str(v.get("ansible_host") or h), role_default(v, "sglang_guard_metrics_port"), h)
            for h, v in router_vars.items()
        ],
        "glm5-dcgm": [target_group(node_address(v, h), dcgm_port, h) for h, v in node_vars.items()]
        if dcgm
        else None,
    }
