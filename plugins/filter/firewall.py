"""Filters of the GPU nodes' host firewall (role node_firewall).

    {{ sources | node_firewall_names }}                  -> the names among them, to resolve on the node
    {{ sources | node_firewall_sources(getent_lines) }}  -> {'v4': [...], 'v6': [...], 'unresolved': [...]}
    {{ api_sets | node_firewall_ruleset(peer_sets, api_ports, guarded_ports) }} -> the nft script

Logic: module_utils/node_firewall.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.node_firewall import (
    names_to_resolve,
    parse_resolved,
    ruleset,
    source_sets,
)


def node_firewall_names(sources: Iterable[Any]) -> list[str]:
    return names_to_resolve(str(s) for s in sources or [])


def node_firewall_sources(sources: Iterable[Any], resolved: str) -> dict[str, list[str]]:
    return source_sets([str(s) for s in sources or []], parse_resolved(str(resolved or "")))


def node_firewall_ruleset(
    api: Mapping[str, Sequence[str]],
    peers: Mapping[str, Sequence[str]],
    api_ports: Sequence[Any],
    guarded_ports: Sequence[Any],
) -> str:
    return ruleset(
        api_ports=[int(p) for p in api_ports],
        guarded_ports=[int(p) for p in guarded_ports],
        api=api,
        peers=peers,
    )


class FilterModule:
    """Host firewall filters of glm5-deploy."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "node_firewall_names": node_firewall_names,
            "node_firewall_sources": node_firewall_sources,
            "node_firewall_ruleset": node_firewall_ruleset,
        }
