"""Filters over the serving topology: replicas, multi-node ranks, rolling batches, the router's workers.

    {{ groups | sglang_topology }}
        -> {replicas: [{name, hosts, leader}], hosts: {host: {replica, rank, nnodes, leader}}}
    {{ inventory_hostname | sglang_place(group_names, groups) }}
        -> {replica, rank, nnodes, leader, hosts}: the node's place, from its own groups alone
    {{ place | sglang_place_settings(hostvars, dist_port) }}
        -> {} or {nnodes, node_rank, dist_init_addr} (rank 0's address)
    {{ topology | sglang_rolling_batches(ansible_play_hosts_all, replicas_per_batch) }}
        -> {hosts: [replica by replica], serial: [batch sizes], batches}
    {{ topology | sglang_router_workers(hostvars) }}
        -> the URL of every replica's rank 0
    {{ hostvars | sglang_replica_url(leader) }} -> one replica's URL (its rank 0's variables only)
    {{ workers_answer | sglang_router_registration(wanted_urls, prune) }}
        -> {add: [url], remove: [{id, url}], changed}
    {{ workers_answer | sglang_router_worker(url) }} -> the worker's entry or None
    {{ workers_answer | sglang_router_healthy }} -> URLs of the healthy, ready workers
    {{ v1_loads_answer | sglang_in_flight }} -> requests running or waiting on an sglang server
    {{ hostvars | sglang_server_bind_host(inventory_hostname) }} -> the address the server binds to
    {{ hostvars | sglang_server_local_url(inventory_hostname) }} -> its URL from itself (https with TLS)
    {{ hostvars | sglang_nodes_ca(inventory_hostname) }} -> {ca_path, ca_file}: the nodes' CA on that host
    {{ hostvars | sglang_host_addresses(hosts) }} -> each host's address (below)
    {{ topology | sglang_replica_peers(inventory_hostname) }} -> the other hosts of its replica
    {{ hostvars | sglang_router_endpoint(router_host) }} -> {url, ca_path, ca_file} on the router's own host

A node's address, for its peers and the router: sglang_server_advertise_host, else ansible_host, else its
name. The server binds to sglang_server_host, else that address (never 0.0.0.0 unless asked).
Logic: module_utils/fleet_topology.py.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import (
    NODES_CA_FILE,
    REPLICA_GROUP_PREFIX,
    TopologyError,
    find_worker,
    healthy_workers,
    in_flight_requests,
    node_address,
    node_scheme,
    nodes_ca_path,
    place_settings,
    registration_plan,
    replica_peers,
    replica_place,
    replica_topology,
    replica_url,
    role_default,
    rolling_batches,
    router_endpoint,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_network import (
    connect_host,
)


def _address(hostvars: Any, host: str) -> str:
    return node_address(hostvars[host], host)


def _guard(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except TopologyError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def sglang_topology(groups: Mapping[str, Sequence[str]], node_group: str = "sglang_nodes") -> dict[str, Any]:
    """The replicas of ``groups[node_group]``, from the ``sglang_replica_*`` groups.

    Every node's tasks ask for it, many times a run: it is worked out once per inventory (the node group and
    the replica groups, as tuples, are the key), in the controller's main process at each play's start
    (callback glm5_preload), so that the tasks' forked workers find it worked out."""
    key = (
        tuple(str(h) for h in groups.get(node_group) or ()),
        tuple(
            (str(g), tuple(str(h) for h in v))
            for g, v in groups.items()
            if str(g).startswith(REPLICA_GROUP_PREFIX)
        ),
    )
    return _topology(key)


@functools.lru_cache(maxsize=8)
def _topology(key: tuple[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]) -> dict[str, Any]:
    nodes, replica_groups = key
    return _guard(replica_topology, list(nodes), {g: list(h) for g, h in replica_groups})


def sglang_place(
    host: str, group_names: Sequence[str], groups: Mapping[str, Sequence[str]]
) -> dict[str, Any]:
    """``host``'s place in its replica, from its own groups: only its replica group's members are read, so a
    node's tasks pay nothing for the size of the fleet (sglang_topology reads every node)."""
    return _guard(replica_place, str(host), [str(g) for g in group_names], groups)


def sglang_place_settings(place: Mapping[str, Any], hostvars: Any, dist_port: int) -> dict[str, Any]:
    """--nnodes/--node-rank/--dist-init-addr for a node at ``place`` (none for a single-node replica)."""
    if int(place["nnodes"]) == 1:  # before the leader's variables are read: a one-node replica needs none
        return {}
    return _guard(place_settings, place, _address(hostvars, str(place["leader"])), int(dist_port))


def sglang_rolling_batches(
    topology: Mapping[str, Any], hosts: Sequence[str], per_batch: int = 1
) -> dict[str, Any]:
    """The play's hosts in replica order, cut into batches of whole replicas."""
    return _guard(rolling_batches, topology, [str(h) for h in hosts], int(per_batch))


def sglang_router_workers(topology: Mapping[str, Any], hostvars: Any) -> list[str]:
    """The URL of every replica's rank 0, the only node of a replica that serves HTTP."""
    return [replica_url(hostvars[r["leader"]], r["leader"]) for r in topology["replicas"]]


def sglang_replica_url(hostvars: Any, leader: str) -> str:
    """The URL of one replica (its rank 0 ``leader``) in the router, from that host's variables alone: the
    cost does not grow with the fleet."""
    return replica_url(hostvars[str(leader)], str(leader))


def sglang_server_bind_host(hostvars: Any, host: str) -> str:
    """The address ``host``'s server binds to: sglang_server_host, else the node's advertised address."""
    return str(hostvars[host].get("sglang_server_host") or _address(hostvars, host))


def sglang_host_addresses(hostvars: Any, hosts: Sequence[str]) -> list[str]:
    """Each host's address as the others reach it (sglang_server_advertise_host, ansible_host, its name)."""
    return [_address(hostvars, str(h)) for h in hosts]


def sglang_router_endpoint(hostvars: Any, host: str) -> dict[str, str]:
    return router_endpoint(hostvars[host], str(host))


def sglang_replica_peers(topology: Mapping[str, Any], host: str) -> list[str]:
    return replica_peers(topology, str(host))


def sglang_server_local_url(hostvars: Any, host: str) -> str:
    """The URL that reaches ``host``'s server from ``host`` itself (a wildcard bind: on loopback)."""
    port = role_default(hostvars[host], "sglang_server_port")
    scheme = node_scheme(hostvars[host])
    return f"{scheme}://{connect_host(sglang_server_bind_host(hostvars, host))}:{int(port)}"


def sglang_nodes_ca(hostvars: Any, host: str) -> dict[str, str]:
    """The CA of the nodes' certificates on ``host``: ``ca_path``, the file its clients of the nodes verify
    them against ("" for the system's CAs), and ``ca_file``, where the roles write sglang_server_ca_bundle."""
    return {"ca_path": nodes_ca_path(hostvars[host]), "ca_file": NODES_CA_FILE}


def sglang_router_registration(listing: Mapping[str, Any], wanted: Sequence[str], prune: bool = True) -> dict:
    """The POSTs and DELETEs that make the router's workers match ``wanted``."""
    return registration_plan(listing, [str(u) for u in wanted], bool(prune))


def sglang_router_worker(listing: Mapping[str, Any], url: str) -> dict[str, Any] | None:
    """The router's entry for ``url`` (id, status, is_healthy, load), or None."""
    return find_worker(listing, str(url))


def sglang_router_healthy(listing: Mapping[str, Any]) -> list[str]:
    """URLs of the workers the router routes to."""
    return healthy_workers(listing)


def sglang_in_flight(loads: Mapping[str, Any]) -> int:
    """Requests running or waiting on a server, from its ``GET /v1/loads`` answer."""
    return in_flight_requests(loads)


class FilterModule:
    """glm5-deploy topology and router filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "sglang_topology": sglang_topology,
            "sglang_place": sglang_place,
            "sglang_place_settings": sglang_place_settings,
            "sglang_rolling_batches": sglang_rolling_batches,
            "sglang_router_workers": sglang_router_workers,
            "sglang_replica_url": sglang_replica_url,
            "sglang_router_registration": sglang_router_registration,
            "sglang_router_worker": sglang_router_worker,
            "sglang_router_healthy": sglang_router_healthy,
            "sglang_in_flight": sglang_in_flight,
            "sglang_server_bind_host": sglang_server_bind_host,
            "sglang_server_local_url": sglang_server_local_url,
            "sglang_host_addresses": sglang_host_addresses,
            "sglang_replica_peers": sglang_replica_peers,
            "sglang_router_endpoint": sglang_router_endpoint,
            "sglang_nodes_ca": sglang_nodes_ca,
        }
