"""Inputs checks, the network: addresses, binds, ports (and those below 1024).

Each check returns a list of problems, one sentence each, that names the variable to change; an empty list
means the input is fine. Pure functions over plain data, shared by the preflight role's filters
(plugins/filter/inputs.py) and the unit tests. A secret's value (a no_log option) is never part of a
message, nor is a URL that carries credentials.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.inputs_values import numeric

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
WILDCARD_ADDRESSES = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


# The shorthand IPv4 forms the resolver takes as an address (inet_aton: 127.1, 0x7f.1, 2130706433, 0).
_INET_ATON_RE = re.compile(r"(?:0[xX][0-9a-fA-F]+|[0-9]+)(?:\.(?:0[xX][0-9a-fA-F]+|[0-9]+)){0,3}")


def parse_address(host: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address a host string means, as the resolver reads it (brackets and an IPv4-mapped IPv6 address
    undone, inet_aton's shorthand forms such as 127.1 read); None for a name."""
    text = str(host if host is not None else "").strip().strip("[]")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        if not _INET_ATON_RE.fullmatch(text):
            return None
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_loopback(host: str) -> bool:
    """True for a loopback address or name (127.0.0.0/8 in any spelling, ::1, ::ffff:127.x, localhost and
    *.localhost in any case, with or without the root's trailing dot)."""
    name = str(host).strip().strip("[]").lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    address = parse_address(name)
    return address is not None and address.is_loopback


def is_wildcard(host: str) -> bool:
    """True for an address a server listens on but nobody connects to: 0.0.0.0, :: (any spelling), *."""
    text = str(host).strip()
    if text == "*":
        return True
    address = parse_address(text)
    return address is not None and address.is_unspecified


def connect_host(bind_host: str) -> str:
    """The host part of a URL that reaches a server bound to bind_host from the same machine.

    A wildcard bind (0.0.0.0, ::) is reached on loopback; an IPv6 address is bracketed.
    """
    host = str(bind_host or "").strip()
    host = WILDCARD_ADDRESSES.get(host, host)
    try:
        if ipaddress.ip_address(host.strip("[]")).version == 6:
            return f"[{host.strip('[]')}]"
    except ValueError:
        pass
    return host


def port_problems(ports: Mapping[str, Any]) -> list[str]:
    """Ports (variable name -> value) that are out of 1-65535, or that two variables share on one host."""
    problems: list[str] = []
    owner: dict[int, str] = {}
    for name, value in ports.items():
        # ASCII digits alone: str.isdigit() also accepts superscripts ('¹'), which int() refuses.
        digits = str(value).strip().isascii() and str(value).strip().isdigit()
        if isinstance(value, bool) or (not isinstance(value, int) and not digits):
            problems.append(f"{name} must be a port number (1-65535), got {value!r}")
            continue
        port = int(value)
        if not 1 <= port <= 65535:
            problems.append(f"{name} must be a port number (1-65535), got {port}")
            continue
        if port in owner:
            problems.append(f"{name} and {owner[port]} are both {port} on one host; give each its own port")
            continue
        owner[port] = name
    return problems


def bind_problems(bind_host: str, api_key: str, *, host_var: str, key_var: str) -> list[str]:
    """A server bound to a non-loopback address without an API key is open to the network: refuse it."""
    if is_loopback(bind_host) or str(api_key or ""):
        return []
    return [
        f"{host_var} is {bind_host!r}, which other machines can reach, and {key_var} is empty. Set "
        f"{key_var} (from a vault) or bind {host_var} to 127.0.0.1"
    ]


# --------------------------------------------------------------------------------------------------------
# Ports below 1024
# --------------------------------------------------------------------------------------------------------

PRIVILEGED_PORTS_BELOW = 1024
_CAP = "CAP_NET_BIND_SERVICE"


def grants_low_ports(unit: str) -> bool:
    """Whether a systemd unit's service may listen on a port below 1024: CAP_NET_BIND_SERVICE in its bounding
    set (all by default; an empty CapabilityBoundingSet= clears it, ~ removes from it) and, for a User= or
    DynamicUser= service, in its AmbientCapabilities=."""
    bounding, ambient, unprivileged = True, False, False
    for raw in unit.splitlines():
        key, _eq, value = raw.strip().partition("=")
        words = value.split()
        if key == "CapabilityBoundingSet":
            if not words:
                bounding = False
            elif words[0].startswith("~"):
                bounding = bounding and _CAP not in value
            elif _CAP in words:
                bounding = True
        elif key == "AmbientCapabilities":
            ambient = bool(words) and (ambient or _CAP in words)
        elif (key == "User" and value.strip() not in ("", "root", "0")) or (
            key == "DynamicUser" and value.strip().lower() in ("yes", "true", "1", "on")
        ):
            unprivileged = True
    return bounding and (ambient or not unprivileged)


def low_port_problems(ports: Mapping[str, Any], units: Mapping[str, tuple[str, str]]) -> list[str]:
    """Ports below 1024 whose service cannot listen there. ``units``: port variable -> (the unit template's
    path, its text); a port whose variable has no unit here is not judged. Out-of-range values are
    port_problems'."""
    problems = []
    for name, value in ports.items():
        number = numeric(value)
        if name not in units or number is None or not 1 <= number < PRIVILEGED_PORTS_BELOW:
            continue
        path, text = units[name]
        if not grants_low_ports(text):
            problems.append(
                f"{name} is {int(number)}, below {PRIVILEGED_PORTS_BELOW}: a service listens there only "
                f"with {_CAP}, which {path} does not grant (an unprivileged user, an empty "
                f"CapabilityBoundingSet=); use a port from {PRIVILEGED_PORTS_BELOW} up, with a proxy in "
                f"front if clients need {int(number)}"
            )
    return problems
