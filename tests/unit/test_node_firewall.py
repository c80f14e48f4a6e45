"""The GPU nodes' host firewall: sources resolved on the node, and the nft table that filters only the serving
ports (module_utils/node_firewall.py). The lab checks it with nft -c and loads it (test_security.py)."""

from __future__ import annotations

from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import (
    replica_peers,
    replica_topology,
)
from ansible_collections.glm5.deploy.plugins.module_utils.node_firewall import (
    TABLE,
    names_to_resolve,
    parse_resolved,
    ruleset,
    source_sets,
)

GETENT = "=table absent\nlab-gateway 10.89.42.5\nprom.example 10.0.0.9 fd00::9\nnowhere.example\n"


def test_only_names_are_resolved_each_once() -> None:
    sources = ["lab-gateway", "10.0.0.1", "10.0.0.0/24", "fd00::1", "[fd00::2]", "lab-gateway", " ", "prom"]
    assert names_to_resolve(sources) == ["lab-gateway", "prom"]


def test_getent_lines_map_names_to_addresses_and_skip_the_table_line() -> None:
    assert parse_resolved(GETENT) == {
        "lab-gateway": ["10.89.42.5"],
        "prom.example": ["10.0.0.9", "fd00::9"],
        "nowhere.example": [],
    }


def test_sources_split_by_family_and_unresolved_names_are_named() -> None:
    sources = ["lab-gateway", "prom.example", "nowhere.example", "192.0.2.0/28", "192.0.2.7"]
    sets = source_sets(sources, parse_resolved(GETENT))
    assert sets == {
        "v4": ["10.0.0.9", "10.89.42.5", "192.0.2.0/28", "192.0.2.7"],
        "v6": ["fd00::9"],
        "unresolved": ["nowhere.example"],
    }


def render(api: list[str], peers: list[str]) -> str:
    return ruleset(
        api_ports=[30000],
        guarded_ports=[20000],
        api=source_sets(api, {}),
        peers=source_sets(peers, {}),
    )


def test_the_table_accepts_the_sources_and_drops_everyone_else_on_the_serving_ports_only() -> None:
    text = render(["10.0.0.5"], [])
    lines = [line.strip() for line in text.splitlines()]
    assert f"delete table inet {TABLE}" in lines  # replaced whole, atomically (the first line creates it)
    assert "elements = { 10.0.0.5 }" in lines
    assert 'iifname "lo" accept' in lines
    assert "tcp dport { 30000 } ip saddr @api_v4 accept" in lines
    assert lines.index("tcp dport { 30000 } ip saddr @api_v4 accept") < lines.index(
        "tcp dport { 20000, 30000 } counter drop"
    )
    assert "policy accept;" in text and "22" not in text  # every other port, ssh too, passes untouched


def test_peers_are_accepted_before_the_drop_and_empty_sets_have_no_elements() -> None:
    text = render([], ["10.0.0.6", "fd00::6"])
    lines = [line.strip() for line in text.splitlines()]
    assert lines.index("ip saddr @peers_v4 accept") < lines.index("tcp dport { 20000, 30000 } counter drop")
    assert lines.count("elements = { 10.0.0.6 }") == 1 and lines.count("elements = { fd00::6 }") == 1
    assert sum("elements" in line for line in lines) == 2


def test_a_replicas_peers_are_its_other_nodes() -> None:
    topology = replica_topology(["a", "b", "c"], {"sglang_replica_big": ["b", "c"]})
    assert replica_peers(topology, "b") == ["c"]
    assert replica_peers(topology, "c") == ["b"]
    assert replica_peers(topology, "a") == []
    assert replica_peers(topology, "stranger") == []
