"""Checks of the inventory's inputs that argument specs cannot express, run before any host changes.

Each check returns a list of problems, one sentence each, that names the variable to change; an empty list
means the input is fine. Pure functions over plain data, so the preflight role's filters and the unit tests
share them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
WILDCARD_ADDRESSES = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def is_loopback(host: str) -> bool:
    """True for a loopback address or name (127.0.0.0/8, ::1, localhost)."""
    name = str(host).strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


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
        if isinstance(value, bool) or (not isinstance(value, int) and not str(value).strip().isdigit()):
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


REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def checkpoint_problems(repo: str, revision: str, source_path: str = "") -> list[str]:
    """The checkpoint's repository must be org/name and its revision pinned (unless copied from a path)."""
    if source_path:
        return []
    problems = []
    if not REPO_RE.match(str(repo)):
        problems.append(
            f"model_checkpoint_repo must be a Hugging Face repository, org/name; got {json.dumps(str(repo))}"
        )
    if not str(revision or "").strip():
        problems.append("model_checkpoint_revision is empty: pin the commit id to deploy")
    return problems


def gpu_problems(gpu_count: int, tp_size: int, *, host: str, var: str) -> list[str]:
    """A node's GPU count must hold its share of the tensor-parallel group, and be a multiple of it."""
    if tp_size < 1:
        return [f"{var} must be at least 1, got {tp_size}"]
    if gpu_count < tp_size:
        return [
            f"{host} has {gpu_count} GPU(s) but {var} is {tp_size}. Lower {var} for this host or group, or "
            "split the replica across nodes"
        ]
    if gpu_count % tp_size:
        return [
            f"{var} is {tp_size}, which does not divide the {gpu_count} GPU(s) of {host}; use a divisor of "
            f"{gpu_count}"
        ]
    return []


def os_problems(distribution: str, version: str, supported: Iterable[str], *, host: str) -> list[str]:
    """The node's OS (distribution + major version, e.g. debian12) must be one the roles support."""
    name = f"{str(distribution).lower()}{str(version).replace('.', '')}"
    wanted = list(supported)
    if name in wanted:
        return []
    return [
        f"{host} runs {distribution} {version} ({name}); the roles support {', '.join(wanted)} "
        "(preflight_supported_os, from the CUDA repositories NVIDIA publishes)"
    ]


def spec_inputs(options: Mapping[str, Any], provided: Mapping[str, Any]) -> dict[str, Any]:
    """The values the inventory or extra vars give for a role's options, without its no_log options.

    Role defaults are not in ``provided`` (they apply when the role runs), so only the operator's inputs are
    validated. Secrets are left to a check that never prints them.
    """
    return {
        name: provided[name]
        for name, spec in options.items()
        if name in provided and not (spec or {}).get("no_log", False)
    }


def secret_problems(options: Mapping[str, Any], provided: Mapping[str, Any]) -> list[str]:
    """Secret options (no_log) must be strings; the message names the variable and never shows the value."""
    return [
        f"{name} must be a string (a key from a vault), got a {type(provided[name]).__name__}"
        for name, spec in options.items()
        if (spec or {}).get("no_log", False)
        and name in provided
        and provided[name] is not None
        and not isinstance(provided[name], str)
    ]
