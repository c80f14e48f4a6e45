"""The inventory contract: the groups a run needs, which host may hold which role, and the addresses that
other hosts connect to.

- ``sglang_nodes``: the GPU nodes, one host or more. Every run needs it.
- ``sglang_router``: the router host (smg, its edge, the guard, the fleet lock): one host at most, since the
  replicas are registered with its first host only and the lock lives there. The runs that route need it
  (site.yml, router.yml, rolling_update.yml, rollback.yml, tune.yml: ``need_router``); the stages that run
  alone (preflight, provision, serve, validate) also serve a fleet without one. A GPU node may also be the
  router host: the inputs play then checks the ports of both on that host together.
- ``prometheus``: optional, any hosts (a node or the router host too).
- ``sglang_replica_<name>``: the nodes of one multi-node replica, rank 0 first: each is in sglang_nodes and
  in one replica group only.

A group whose name differs from one of these only by case or punctuation (SGLANG_NODES, sglang-router) is
refused: Ansible's group names are exact, and a play on the real name would match no host.

Pure functions over plain data: ``groups`` as Ansible gives it, and each host's variables (the few named in
CONTRACT_VARS) as a plain mapping. Each returns problems, one sentence each, that name the group, host or
variable to change; an empty list means the inventory keeps the contract.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import REPLICA_GROUP_PREFIX
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_network import (
    is_loopback,
    is_wildcard,
    parse_address,
)

NODES = "sglang_nodes"
ROUTER = "sglang_router"
PROMETHEUS = "prometheus"
CONTRACT_GROUPS = (NODES, ROUTER, PROMETHEUS)
SEE = "See README 'Production inventory'."
# The host variables the contract reads (the filter passes the ones a host defines).
CONTRACT_VARS = (
    "ansible_host",
    "ansible_ssh_host",
    "ansible_port",
    "ansible_ssh_port",
    "ansible_connection",
    "sglang_server_advertise_host",
    "sglang_server_host",
    "sglang_router_host",
    "sglang_router_metrics_host",
    "sglang_guard_metrics_host",
    "node_firewall_enabled",
    "node_firewall_api_sources",
)
# Connection plugins that reach a machine over ssh (ansible_host and ansible_port name it); local is the
# controller itself, never a machine of the fleet.
SSH_CONNECTIONS = frozenset({"ssh", "smart", "paramiko", "paramiko_ssh", "libssh"})
LOCAL_CONNECTIONS = frozenset({"local"})
DEFAULT_SSH_PORT = 22


# --------------------------------------------------------------------------------------------------------
# Groups
# --------------------------------------------------------------------------------------------------------


def _hosts(count: int) -> str:
    return f"{count} host" if count == 1 else f"{count} hosts"


def group_summary(groups: Mapping[str, Sequence[str]]) -> str:
    """The inventory's groups with their host counts (not ``all``; ``ungrouped`` when it holds hosts)."""
    shown = [
        f"{name} ({_hosts(len(hosts))})"
        for name, hosts in sorted(groups.items())
        if name != "all" and (name != "ungrouped" or hosts)
    ]
    return ", ".join(shown) if shown else "none (no host in any group)"


def _spelling(name: str) -> str:
    """A group name as an operator might have meant it: lower case, runs of punctuation as one underscore."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _meant(name: str) -> str | None:
    """The contract's group that ``name`` misspells by case or punctuation (None: none, or spelled right)."""
    spelled = _spelling(name)
    for wanted in CONTRACT_GROUPS:
        if spelled == wanted and name != wanted:
            return wanted
    if spelled.startswith(REPLICA_GROUP_PREFIX) and not name.startswith(REPLICA_GROUP_PREFIX):
        return REPLICA_GROUP_PREFIX + spelled.removeprefix(REPLICA_GROUP_PREFIX)
    return None


def _near(name: str, groups: Iterable[str]) -> list[str]:
    """The inventory's groups whose names are close to ``name`` (sglang_node for sglang_nodes)."""
    candidates = {_spelling(g): g for g in groups if g not in ("all", "ungrouped") and g != name}
    return [candidates[c] for c in difflib.get_close_matches(name, list(candidates), n=2, cutoff=0.85)]


def group_problems(groups: Mapping[str, Sequence[str]], *, need_router: bool = False) -> list[str]:
    """The groups the run needs are there and hold hosts; the router group holds one host at most; replica
    groups hold GPU nodes, each in one replica; no group misspells one of the contract's."""
    groups = {str(k): [str(h) for h in (v or [])] for k, v in groups.items()}
    problems: list[str] = []
    needs = f"{NODES} (the GPU nodes)" + (f" and {ROUTER} (the router host)" if need_router else "")
    missing = [name for name in (NODES, ROUTER) if not groups.get(name) and (name == NODES or need_router)]
    if missing:
        hints = [f"{g} (did you mean {name}?)" for name in missing for g in _near(name, groups)]
        near = f" Close to it: {', '.join(hints)}." if hints else ""
        which = " and ".join(missing)
        problems.append(
            f"inventory: {'group' if len(missing) == 1 else 'groups'} {which} "
            f"{'is' if len(missing) == 1 else 'are'} missing or empty; the run needs {needs}. This inventory "
            f"has groups: {group_summary(groups)}.{near} {SEE}"
        )
    for name in sorted(groups):
        meant = _meant(name)
        if meant:
            problems.append(
                f"inventory: group {name} is not {meant}: Ansible's group names are exact, so the plays for "
                f"{meant} would not see its hosts. Rename it {meant}. {SEE}"
            )
    routers = groups.get(ROUTER, [])
    if len(routers) > 1:
        problems.append(
            f"inventory: group {ROUTER} has {len(routers)} hosts ({', '.join(routers)}); it holds one, the "
            "router host: smg, its edge, the guard and the fleet lock run there, and the replicas are "
            f"registered with its first host only. Keep one host in {ROUTER}. {SEE}"
        )
    return problems + replica_group_problems(groups)


def replica_group_problems(groups: Mapping[str, Sequence[str]]) -> list[str]:
    """Replica groups (sglang_replica_<name>): named, not empty, GPU nodes only, each node in one."""
    problems: list[str] = []
    nodes = set(groups.get(NODES) or [])
    owner: dict[str, str] = {}
    empty = []
    for group in sorted(g for g in groups if g.startswith(REPLICA_GROUP_PREFIX)):
        hosts = list(groups[group] or [])
        if group == REPLICA_GROUP_PREFIX:
            problems.append(
                f"inventory: group {group} names no replica; call it {REPLICA_GROUP_PREFIX}<name> (the name "
                "the summary and the rolling batches show)"
            )
        if not hosts:
            empty.append(group)
            continue
        strangers = [h for h in hosts if h not in nodes]
        if strangers:
            them = "it" if len(strangers) == 1 else "them"
            problems.append(
                f"inventory: group {group} has {', '.join(strangers)}, not in {NODES}: every member of a "
                f"replica is a GPU node. Add {them} to {NODES} too, or take {them} out of {group}"
            )
        for host in hosts:
            if host in owner:
                problems.append(
                    f"inventory: {host} is in two replica groups, {owner[host]} and {group}: a node serves "
                    "one replica. Take it out of one"
                )
            else:
                owner[host] = group
    if empty:
        problems.append(
            f"inventory: the group(s) {', '.join(empty)} have no hosts: a {REPLICA_GROUP_PREFIX}* group "
            "lists the nodes of one multi-node replica, rank 0 first. Add its nodes or remove the group"
        )
    return problems


# --------------------------------------------------------------------------------------------------------
# Two names, one machine
# --------------------------------------------------------------------------------------------------------


def canonical_host(host: Any) -> str:
    """A host as one machine's name: an address in its one spelling (10.0.0.1 for ::ffff:10.0.0.1, ::1 for
    [0:0::1]), a name in lower case without the root's trailing dot."""
    address = parse_address(host)
    if address is not None:
        return str(address)
    return str(host if host is not None else "").strip().strip("[]").lower().rstrip(".")


def _port(value: Any) -> int | str:
    text = str(value).strip()
    return int(text) if text.isascii() and text.isdigit() else text


def machine_key(name: str, host_vars: Mapping[str, Any]) -> tuple[str, str, int | str | None] | None:
    """What Ansible connects to for host ``name``: (connection, host, port); None for the controller itself
    (a local connection). ssh-like connections share a key (the same ansible_host and ansible_port reach one
    sshd); a container connection's ansible_host names the container."""
    connection = str(host_vars.get("ansible_connection") or "ssh").strip()
    short = connection.rsplit(".", 1)[-1]
    if short in LOCAL_CONNECTIONS:
        return None
    host = canonical_host(host_vars.get("ansible_host") or host_vars.get("ansible_ssh_host") or name)
    if short in SSH_CONNECTIONS:
        port = host_vars.get("ansible_port") or host_vars.get("ansible_ssh_port") or DEFAULT_SSH_PORT
        return ("ssh", host, _port(port))
    return (connection, host, None)


def machine_problems(hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Two inventory names that reach one machine (the same ansible_host and ansible_port): its roles would
    be checked apart (ports, addresses) and deployed twice, as two replicas on the same GPUs."""
    names: dict[tuple[str, str, int | str | None], list[str]] = {}
    for name, host_vars in hosts.items():
        key = machine_key(str(name), host_vars or {})
        if key is not None:
            names.setdefault(key, []).append(str(name))
    problems = []
    for (connection, host, port), same in names.items():
        if len(same) < 2:
            continue
        how = f"ansible_host {host}, port {port}" if connection == "ssh" else f"{connection} {host}"
        problems.append(
            f"inventory: {' and '.join(same)} reach one machine ({how}): list a machine once, under one "
            "name, in every group it has a role in (a GPU node that is also the router host is in both "
            f"groups by the same name). Remove the other names, or give each its own ansible_host. {SEE}"
        )
    return problems


# --------------------------------------------------------------------------------------------------------
# Addresses other hosts connect to
# --------------------------------------------------------------------------------------------------------


def peer_address(name: str, host_vars: Mapping[str, Any]) -> tuple[str, str]:
    """The address other hosts reach ``name`` at (the roles' rule: sglang_server_advertise_host, else
    ansible_host, else the inventory name), and where it comes from."""
    for var in ("sglang_server_advertise_host", "ansible_host"):
        value = host_vars.get(var)
        if value is not None and str(value).strip():
            return str(value).strip(), f"{var} of {name}"
    return name, f"the inventory name {name} (no ansible_host)"


def _unreachable(address: str, away: bool = True) -> str | None:
    """Why peers cannot connect to ``address``, or None; ``away``: a peer is on another machine."""
    if is_wildcard(address):
        return "a wildcard address, where a server listens, not one to connect to"
    if away and is_loopback(address):
        return "a loopback address, which is every machine's own"
    return None


def _listed(hosts: Iterable[str]) -> str:
    return ", ".join(sorted(hosts))


def _replicas(groups: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Each replica's hosts, rank 0 first (a node in no replica group is a replica of its own)."""
    nodes = list(groups.get(NODES) or [])
    grouped = [list(groups[g]) for g in sorted(groups) if g.startswith(REPLICA_GROUP_PREFIX) and groups[g]]
    inside = {h for hosts in grouped for h in hosts}
    return grouped + [[n] for n in nodes if n not in inside]


def _machine(name: str, hosts: Mapping[str, Mapping[str, Any]]) -> tuple[str, str, int | str | None]:
    """The machine a host is: its machine_key; the controller for a local connection."""
    return machine_key(name, hosts.get(name) or {}) or ("local", "", None)


def _elsewhere(host: str, peers: Iterable[str], hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The peers on another machine than ``host`` (loopback reaches the others)."""
    here = _machine(host, hosts)
    return [p for p in peers if p != host and _machine(p, hosts) != here]


def _peers(
    node: str,
    rank: int,
    replica: Sequence[str],
    routers: Sequence[str],
    scrapers: Sequence[str],
    hosts: Mapping[str, Mapping[str, Any]],
) -> tuple[str, bool]:
    """Who connects to a node, by role: the router and the replica's other ranks connect to rank 0, Prometheus
    to every node; and whether one of them is on another machine (where loopback does not reach). Empty:
    nobody but the node itself."""
    roles = {
        "the router": routers if rank == 0 else [],
        "the other ranks of its replica": replica[1:] if rank == 0 else [],
        "Prometheus": scrapers,
    }
    named = [
        f"{role} ({_listed(others)})"
        for role, hosts_of in roles.items()
        if (others := [h for h in hosts_of if h != node])
    ]
    away = bool(_elsewhere(node, [h for hosts_of in roles.values() for h in hosts_of], hosts))
    return " and ".join(filter(None, [", ".join(named[:-1]), *named[-1:]])), away


def reach_problems(groups: Mapping[str, Sequence[str]], hosts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Addresses other hosts connect to that they cannot reach: a wildcard (0.0.0.0, ::) anywhere, a loopback
    address (127.x, ::1, localhost) where the peer is another host. Checked: each node's address for the
    router, Prometheus and the other ranks of its replica (rank 0's is the replica's dist-init address); a
    node server bound to loopback; the router host's address and metrics listeners for Prometheus; the
    router's and Prometheus's addresses as the nodes' firewall lets them in."""
    groups = {str(k): [str(h) for h in (v or [])] for k, v in groups.items()}
    routers, scrapers = groups.get(ROUTER, []), groups.get(PROMETHEUS, [])
    problems: list[str] = []
    for replica in _replicas(groups):
        for rank, node in enumerate(replica):
            own = hosts.get(node) or {}
            peers, away = _peers(node, rank, replica, routers, scrapers, hosts)
            if not peers:
                continue
            advertised = own.get("sglang_server_advertise_host")
            if advertised is not None and not str(advertised).strip():
                problems.append(
                    f"inventory: sglang_server_advertise_host of {node} is empty: it is the address that "
                    f"{peers} connect to. Set it, or leave it unset for ansible_host"
                )
                continue
            address, where = peer_address(node, own)
            why = _unreachable(address, away)
            if why:
                dist = " (also its replica's dist-init address)" if rank == 0 and len(replica) > 1 else ""
                problems.append(
                    f"inventory: {node}'s address{dist} is {address!r} ({where}), {why}: {peers} cannot "
                    f"connect there. Set sglang_server_advertise_host of {node} to an address they reach it "
                    "at"
                )
                continue
            bind = own.get("sglang_server_host")
            if bind and away and is_loopback(str(bind)):
                problems.append(
                    f"inventory: sglang_server_host of {node} is {str(bind)!r}: its server listens on "
                    f"loopback only, where {peers} cannot connect. Leave it unset (the server binds to "
                    f"{address!r})"
                )
    problems += _router_reach_problems(routers, scrapers, hosts)
    problems += _firewall_source_problems(groups, hosts)
    return problems


def _router_reach_problems(
    routers: Sequence[str], scrapers: Sequence[str], hosts: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Prometheus scrapes the router's and the guard's metrics at the router host's ansible_host (role
    sglang_monitoring), on the addresses they listen on."""
    problems: list[str] = []
    for router in routers[:1]:
        others = _elsewhere(router, scrapers, hosts)
        if not others:
            continue
        own = hosts.get(router) or {}
        address = str(own.get("ansible_host") or router)
        why = _unreachable(address)
        if why:
            where = f"ansible_host of {router}" if own.get("ansible_host") else f"the inventory name {router}"
            problems.append(
                f"inventory: Prometheus ({_listed(others)}) scrapes the router's and the guard's metrics at "
                f"{address!r} ({where}), {why}. Give {router} an ansible_host that Prometheus reaches"
            )
        # The listeners' addresses, as the roles' defaults chain them: the guard's follows the router's
        # metrics address, which follows the router's own (0.0.0.0 by default).
        metrics_var = next(
            (v for v in ("sglang_router_metrics_host", "sglang_router_host") if own.get(v)),
            "sglang_router_host",
        )
        guard_var = "sglang_guard_metrics_host" if own.get("sglang_guard_metrics_host") else metrics_var
        listeners: dict[str, list[str]] = {}
        for what, var in (("the router's", metrics_var), ("the guard's", guard_var)):
            listeners.setdefault(var, []).append(what)
        for var, whose in listeners.items():
            bind = str(own.get(var) or "0.0.0.0")
            if is_loopback(bind):
                problems.append(
                    f"inventory: {var} of {router} is {bind!r}, so {' and '.join(whose)} metrics listen on "
                    f"loopback only, where Prometheus ({_listed(others)}) cannot scrape them. Set {var} to "
                    "an address Prometheus reaches, or 0.0.0.0"
                )
    return problems


def _firewall_source_problems(
    groups: Mapping[str, Sequence[str]], hosts: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """The nodes' firewall (role node_firewall) lets the router and Prometheus hosts in by their addresses:
    a loopback or wildcard one lets nothing in from another machine."""
    guarded = [
        n
        for n in groups.get(NODES) or []
        if boolean((hosts.get(n) or {}).get("node_firewall_enabled", True), strict=False)
        and "node_firewall_api_sources" not in (hosts.get(n) or {})
    ]
    problems = []
    for source in dict.fromkeys(list(groups.get(ROUTER) or []) + list(groups.get(PROMETHEUS) or [])):
        behind = _elsewhere(source, guarded, hosts)
        if not behind:
            continue
        address, where = peer_address(source, hosts.get(source) or {})
        why = _unreachable(address)
        if why:
            problems.append(
                f"inventory: the nodes' firewall lets {source} in at {address!r} ({where}), {why}: its "
                f"requests to {_listed(behind)} come from its own address and would be dropped. Give "
                f"{source} an ansible_host the nodes see it at, or list the sources in "
                "node_firewall_api_sources"
            )
    return problems


# --------------------------------------------------------------------------------------------------------
# All of it
# --------------------------------------------------------------------------------------------------------


def inventory_problems(
    groups: Mapping[str, Sequence[str]], hosts: Mapping[str, Mapping[str, Any]], *, need_router: bool = False
) -> list[str]:
    """The whole contract: the groups first (the rest reads them, so it waits until they are right), then
    two names for one machine and the addresses peers connect to."""
    problems = group_problems(groups, need_router=need_router)
    if problems:
        return problems
    return machine_problems(hosts) + reach_problems(groups, hosts)
