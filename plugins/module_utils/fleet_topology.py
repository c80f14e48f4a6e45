"""The serving topology from the inventory: replicas, ranks, router workers, rolling-update batches.

A replica is one sglang server: one node, or several nodes that run one tensor-parallel model
together (``--nnodes``/``--node-rank``/``--dist-init-addr``). Multi-node replicas are inventory groups whose
name starts with ``sglang_replica_``; their hosts are ranked in the group's inventory order, and rank 0
(the leader) is the replica's HTTP endpoint. A node of ``sglang_nodes`` in no such group is a replica
of its own.

Pure functions over plain data, so the same code serves the filters, the modules and the unit tests.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

REPLICA_GROUP_PREFIX = "sglang_replica_"


class TopologyError(ValueError):
    """An inventory that does not describe a valid topology."""


def replica_topology(
    nodes: Sequence[str], groups: Mapping[str, Sequence[str]], prefix: str = REPLICA_GROUP_PREFIX
) -> dict[str, Any]:
    """Replicas of ``nodes`` (in inventory order) from the ``<prefix>*`` groups of ``groups``.

    Returns ``{"replicas": [{"name", "hosts", "leader"}], "hosts": {host: {"replica", "rank", "nnodes",
    "leader"}}}``. Replicas come in the order of their first host in ``nodes``.
    """
    node_set = set(nodes)
    owner: dict[str, str] = {}
    members: dict[str, list[str]] = {}
    for group in sorted(g for g in groups if g.startswith(prefix)):
        hosts = list(dict.fromkeys(groups[group]))
        if not hosts:
            continue
        strangers = [h for h in hosts if h not in node_set]
        if strangers:
            raise TopologyError(
                f"replica group {group} has host(s) {', '.join(strangers)} outside the serving nodes; "
                "every member of a replica must also be in sglang_nodes"
            )
        for host in hosts:
            if host in owner:
                raise TopologyError(
                    f"{host} is in two replica groups ({owner[host]} and {group}); a node serves one replica"
                )
            owner[host] = group
        members[group] = hosts
    replicas: list[dict[str, Any]] = []
    seen: set[str] = set()
    for node in nodes:
        name = owner.get(node, node)
        if name in seen:
            continue
        seen.add(name)
        hosts = members.get(name, [node])
        replicas.append(
            {
                "name": name.removeprefix(prefix) if name in members else name,
                "hosts": hosts,
                "leader": hosts[0],
            }
        )
    by_host = {
        host: {"replica": r["name"], "rank": rank, "nnodes": len(r["hosts"]), "leader": r["leader"]}
        for r in replicas
        for rank, host in enumerate(r["hosts"])
    }
    return {"replicas": replicas, "hosts": by_host}


def replica_place(
    host: str,
    group_names: Iterable[str],
    members_of: Mapping[str, Sequence[str]],
    prefix: str = REPLICA_GROUP_PREFIX,
) -> dict[str, Any]:
    """``host``'s place in its replica from its own groups alone (``group_names``, and the members of its one
    ``<prefix>*`` group in ``members_of``): ``{"replica", "rank", "nnodes", "leader", "hosts"}``, as
    replica_topology's ``hosts[host]`` plus the replica's hosts. A host in no such group is a replica of
    its own.

    A node's tasks ask for their place many times a run; unlike replica_topology, the cost does not grow
    with the fleet. That the replica groups hold only serving nodes is the inventory contract's check, once
    a run."""
    own = sorted(str(g) for g in group_names if str(g).startswith(prefix))
    if len(own) > 1:
        raise TopologyError(
            f"{host} is in two replica groups ({own[0]} and {own[1]}); a node serves one replica"
        )
    if not own:
        return {"replica": host, "rank": 0, "nnodes": 1, "leader": host, "hosts": [host]}
    hosts = list(dict.fromkeys(str(h) for h in members_of[own[0]]))
    if host not in hosts:
        raise TopologyError(f"{host} is not among the hosts of its replica group {own[0]}")
    return {
        "replica": own[0].removeprefix(prefix),
        "rank": hosts.index(host),
        "nnodes": len(hosts),
        "leader": hosts[0],
        "hosts": hosts,
    }


# The fleet-wide values that the controller's filters need for a host whose inventory does not set them
# (hostvars holds the inventory's values, never a role's defaults). Each equals roles/glm5_defaults'
# defaults/main.yml, their one home in YAML (tests/unit/test_fleet_topology.py reads it): the one place the
# Python side states them.
ROLE_DEFAULTS: dict[str, Any] = {
    "sglang_server_port": 30000,
    "sglang_router_port": 30000,
    "sglang_router_metrics_port": 29000,
    "sglang_guard_metrics_port": 29100,
    "model_checkpoint_repo": "nvidia/GLM-5-NVFP4",
}


def role_default(host_vars: Mapping[str, Any], name: str) -> Any:
    """The host's value of ``name``, else its role's default (ROLE_DEFAULTS)."""
    return host_vars.get(name) or ROLE_DEFAULTS[name]


# Where the router role writes the CA bundle its clients trust (world-readable: the guard is a DynamicUser).
ROUTER_CA_FILE = "/etc/glm5-deploy/router-ca.pem"


def router_endpoint(router_vars: Mapping[str, Any], host: str) -> dict[str, str]:
    """The router on ``host`` as the playbooks' clients on that host reach it, from its variables (the
    role's defaults where unset): over TLS by sglang_router_tls_name (else ansible_host, else ``host``; a name
    its certificate holds) when sglang_router_tls_certificate is set, else plain HTTP on loopback.
    ``ca_path``: the CA file to verify it against ("" for the system's CAs); ``ca_file``: where the router
    role writes it."""
    port = int(role_default(router_vars, "sglang_router_port"))
    name = router_vars.get("sglang_router_tls_name") or router_vars.get("ansible_host") or host
    tls = bool(router_vars.get("sglang_router_tls_certificate"))
    return {
        "url": f"https://{name}:{port}" if tls else f"http://127.0.0.1:{port}",
        "ca_path": ROUTER_CA_FILE if router_vars.get("sglang_router_ca_bundle") else "",
        "ca_file": ROUTER_CA_FILE,
    }


# Where the roles write the CA bundle the nodes' clients trust (sglang_server_ca_bundle): on the nodes, the
# router's host and the Prometheus hosts; world-readable, like the router's.
NODES_CA_FILE = "/etc/glm5-deploy/nodes-ca.pem"


def node_scheme(node_vars: Mapping[str, Any]) -> str:
    """How a node's server is reached: https when it has a TLS certificate (sglang_server_tls_certificate),
    else http."""
    return "https" if node_vars.get("sglang_server_tls_certificate") else "http"


def nodes_ca_path(host_vars: Mapping[str, Any]) -> str:
    """The CA file a host's clients of the nodes verify them against: NODES_CA_FILE when the host's
    sglang_server_ca_bundle is set, else "" (the system's CAs)."""
    return NODES_CA_FILE if host_vars.get("sglang_server_ca_bundle") else ""


def replica_peers(topology: Mapping[str, Any], host: str) -> list[str]:
    """The other hosts of ``host``'s replica (none for a one-node replica or a host outside the topology)."""
    place = topology["hosts"].get(host)
    if place is None:
        return []
    (replica,) = [r for r in topology["replicas"] if r["leader"] == place["leader"]]
    return [h for h in replica["hosts"] if h != host]


def place_settings(place: Mapping[str, Any], leader_address: str, dist_port: int) -> dict[str, Any]:
    """The sglang settings of a node at ``place`` in its replica (replica_place): empty for a single-node
    replica, else --nnodes, --node-rank and --dist-init-addr (rank 0's address and ``dist_port``)."""
    if place["nnodes"] == 1:
        return {}
    if not 0 < int(dist_port) < 65536:
        raise TopologyError(f"sglang_server_dist_port {dist_port!r} is not a TCP port")
    host_part = f"[{leader_address}]" if ":" in leader_address else leader_address
    address = f"{host_part}:{dist_port}"
    return {"nnodes": place["nnodes"], "node_rank": place["rank"], "dist_init_addr": address}


def rolling_batches(
    topology: Mapping[str, Any], hosts: Iterable[str], replicas_per_batch: int = 1
) -> dict[str, Any]:
    """Order ``hosts`` (the play's hosts) replica by replica, and cut them into batches of whole replicas.

    Returns ``{"hosts": [...], "serial": [batch sizes in hosts]}``: the play's ``serial`` as a list makes
    every batch exactly ``replicas_per_batch`` replicas. A host set that splits a replica is refused.
    """
    if int(replicas_per_batch) < 1:
        raise TopologyError(
            f"sglang_rolling_replicas_per_batch must be 1 or more, got {replicas_per_batch!r}"
        )
    wanted = set(hosts)
    chosen = []
    for replica in topology["replicas"]:
        inside = [h for h in replica["hosts"] if h in wanted]
        if inside and len(inside) != len(replica["hosts"]):
            missing = [h for h in replica["hosts"] if h not in wanted]
            raise TopologyError(
                f"the play would update replica {replica['name']} only in part (without "
                f"{', '.join(missing)}); --limit whole replicas"
            )
        if inside:
            chosen.append(replica)
    unknown = sorted(wanted - {h for r in chosen for h in r["hosts"]})
    if unknown:
        raise TopologyError(f"{', '.join(unknown)} not in sglang_nodes: nothing to roll there")
    per = int(replicas_per_batch)
    batches = [chosen[i : i + per] for i in range(0, len(chosen), per)]
    return {
        "hosts": [h for r in chosen for h in r["hosts"]],
        "serial": [sum(len(r["hosts"]) for r in batch) for batch in batches],
        "batches": math.ceil(len(chosen) / per) if chosen else 0,
    }


# --------------------------------------------------------------------------------------------------------
# The router's worker list
# --------------------------------------------------------------------------------------------------------


def worker_url(address: str, port: int | str, scheme: str = "http") -> str:
    """The URL the router sends a replica's requests to."""
    host_part = f"[{address}]" if ":" in address else address
    return f"{scheme}://{host_part}:{int(port)}"


def node_address(host_vars: Mapping[str, Any], host: str) -> str:
    """How other hosts reach a node: sglang_server_advertise_host, else ansible_host, else its name."""
    return str(host_vars.get("sglang_server_advertise_host") or host_vars.get("ansible_host") or host)


def replica_url(host_vars: Mapping[str, Any], leader: str) -> str:
    """The URL the router sends a replica's requests to, from its rank 0's variables alone: the address
    (sglang_server_advertise_host, else ansible_host, else the host's name), sglang_server_port (30000) and
    the scheme (https with a server certificate)."""
    port = role_default(host_vars, "sglang_server_port")
    return worker_url(node_address(host_vars, leader), port, node_scheme(host_vars))


def _norm(url: str) -> str:
    return url.rstrip("/")


def find_worker(listing: Mapping[str, Any], url: str) -> dict[str, Any] | None:
    """The entry of ``url`` in a ``GET /workers`` answer, or None."""
    for worker in listing.get("workers") or []:
        if _norm(str(worker.get("url", ""))) == _norm(url):
            return dict(worker)
    return None


def registration_plan(listing: Mapping[str, Any], wanted: Sequence[str], prune: bool) -> dict[str, Any]:
    """What to POST and DELETE so that the router serves exactly ``wanted`` (or at least, with no prune).

    ``listing`` is the router's ``GET /workers`` answer. A wanted URL already registered is left alone, so a
    second run adds nothing; with ``prune``, registered URLs that are not wanted are removed by id.
    """
    registered = {_norm(str(w.get("url", ""))): w for w in listing.get("workers") or []}
    want = list(dict.fromkeys(_norm(u) for u in wanted))
    add = [u for u in want if u not in registered]
    remove = (
        [{"id": w["id"], "url": url} for url, w in registered.items() if url not in want and "id" in w]
        if prune
        else []
    )
    return {"add": add, "remove": remove, "changed": bool(add or remove)}


def healthy_workers(listing: Mapping[str, Any]) -> list[str]:
    """URLs of the workers the router would route to: healthy and not draining."""
    return [
        _norm(str(w.get("url", "")))
        for w in listing.get("workers") or []
        if w.get("is_healthy") and str(w.get("status", "ready")) not in ("draining", "not_ready")
    ]


def in_flight_requests(loads: Mapping[str, Any]) -> int:
    """Running plus waiting requests over every DP rank of an sglang ``GET /v1/loads`` answer."""
    return sum(
        int(rank.get("num_running_reqs") or 0) + int(rank.get("num_waiting_reqs") or 0)
        for rank in loads.get("loads") or []
    )


def hold_name(url: str) -> str:
    """The file name of a worker's hold marker in the router host's hold directory: the sha1 of its URL (the
    guard reads the URL inside)."""
    return hashlib.sha1(_norm(url).encode()).hexdigest()


def batch_plan(listing: Mapping[str, Any], present: Sequence[str], absent: Sequence[str]) -> dict[str, Any]:
    """What to POST (``add``) and DELETE (``remove``: ``{id, url}``) so that the ``present`` URLs are in the
    router and the ``absent`` ones out, from its ``GET /workers`` answer. A URL in both is refused."""
    both = sorted({_norm(u) for u in present} & {_norm(u) for u in absent})
    if both:
        raise TopologyError(f"a worker cannot be put in and taken out at once: {', '.join(both)}")
    registered = {_norm(str(w.get("url", ""))): w for w in listing.get("workers") or []}
    add = [u for u in dict.fromkeys(_norm(u) for u in present) if u not in registered]
    remove = [
        {"id": registered[u]["id"], "url": u}
        for u in dict.fromkeys(_norm(u) for u in absent)
        if u in registered and "id" in registered[u]
    ]
    return {"add": add, "remove": remove}


def batch_waiting(listing: Mapping[str, Any], present: Sequence[str], absent: Sequence[str]) -> list[str]:
    """The URLs not settled yet: a ``present`` one the router does not route to (healthy and ready), an
    ``absent`` one it still lists (draining, or not yet dropped)."""
    healthy = set(healthy_workers(listing))
    listed = {_norm(str(w.get("url", ""))) for w in listing.get("workers") or []}
    return [_norm(u) for u in present if _norm(u) not in healthy] + [
        _norm(u) for u in absent if _norm(u) in listed
    ]
