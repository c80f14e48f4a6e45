"""The GPU nodes' host firewall (role node_firewall): which addresses may reach the serving ports, as an
nftables table of its own.

The table filters only the ports it names (the server's API port, which also serves /metrics, and the
multi-node rendezvous port): everything else, ssh included, passes untouched, so the control node is never
locked out and the host's own rules keep working. A replica's peers are accepted on every port
(torch.distributed and NCCL's bootstrap use ports of their own); loopback always is (a node's checks ask its
own address).

Sources are names or addresses; names are resolved on the node (``getent ahosts``, what the node's packets
will come from), and a name that does not resolve is refused before anything is written, since the rule
would drop the router.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence

TABLE = "glm5_deploy"


def _network(item: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(item.strip("[]"), strict=False)
    except ValueError:
        return None


def names_to_resolve(sources: Iterable[str]) -> list[str]:
    """The sources that are names (not addresses or networks), each once, in order."""
    names: list[str] = []
    for item in sources:
        text = str(item).strip()
        if text and _network(text) is None and text not in names:
            names.append(text)
    return names


def parse_resolved(text: str) -> dict[str, list[str]]:
    """``name addr addr ...`` lines (the role's getent loop) -> name -> addresses (none: did not resolve).
    Lines that start with ``=`` are the role's own reports (the live table), which no name can start with."""
    resolved: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("="):
            resolved[fields[0]] = sorted({a for a in fields[1:] if _network(a) is not None})
    return resolved


def source_sets(sources: Iterable[str], resolved: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Sources -> {'v4': [...], 'v6': [...], 'unresolved': [names]}: addresses and networks as given, names
    as the node resolved them."""
    v4: set[str] = set()
    v6: set[str] = set()
    unresolved: list[str] = []
    for item in sources:
        text = str(item).strip()
        if not text:
            continue
        network = _network(text)
        found = [network] if network is not None else [_network(a) for a in resolved.get(text, [])]
        found = [n for n in found if n is not None]
        if not found:
            unresolved.append(text)
        for net in found:
            shown = str(net) if net.num_addresses > 1 else str(net.network_address)
            (v4 if net.version == 4 else v6).add(shown)
    return {"v4": sorted(v4), "v6": sorted(v6), "unresolved": sorted(set(unresolved))}


def _set(name: str, kind: str, elements: Sequence[str]) -> list[str]:
    body = [f"  set {name} {{", f"    type {kind}", "    flags interval", "    auto-merge"]
    if elements:
        body.append(f"    elements = {{ {', '.join(elements)} }}")
    return [*body, "  }"]


def ruleset(
    *,
    api_ports: Sequence[int],
    guarded_ports: Sequence[int],
    api: Mapping[str, Sequence[str]],
    peers: Mapping[str, Sequence[str]],
) -> str:
    """The nft script: (re)creates table inet glm5_deploy atomically. ``api_ports`` are open to the ``api``
    sources; every port in ``guarded_ports`` (the API ports included) is dropped for everyone else; the
    ``peers`` (a replica's other nodes) are accepted on every port."""
    ports = sorted({int(p) for p in guarded_ports} | {int(p) for p in api_ports})
    allowed = ", ".join(str(p) for p in sorted({int(p) for p in api_ports}))
    lines = [
        "#!/usr/sbin/nft -f",
        "# glm5-deploy (role node_firewall): the serving ports only from the router, monitoring and the",
        "# replica's peers; every other port passes untouched. Written by Ansible: set the role's variables.",
        f"table inet {TABLE}",
        f"delete table inet {TABLE}",
        f"table inet {TABLE} {{",
        *_set("api_v4", "ipv4_addr", api.get("v4", [])),
        *_set("api_v6", "ipv6_addr", api.get("v6", [])),
        *_set("peers_v4", "ipv4_addr", peers.get("v4", [])),
        *_set("peers_v6", "ipv6_addr", peers.get("v6", [])),
        "  chain input {",
        "    type filter hook input priority filter; policy accept;",
        '    iifname "lo" accept',
        "    ip saddr @peers_v4 accept",
        "    ip6 saddr @peers_v6 accept",
    ]
    if allowed:
        lines += [
            f"    tcp dport {{ {allowed} }} ip saddr @api_v4 accept",
            f"    tcp dport {{ {allowed} }} ip6 saddr @api_v6 accept",
        ]
    if ports:
        lines.append(f"    tcp dport {{ {', '.join(str(p) for p in ports)} }} counter drop")
    lines += ["  }", "}", ""]
    return "\n".join(lines)
