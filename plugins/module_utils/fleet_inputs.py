"""Checks of the inventory's inputs that argument specs cannot express, run before any host changes.

Each check returns a list of problems, one sentence each, that names the variable to change; an empty list
means the input is fine. Pure functions over plain data, so the preflight role's filters and the unit tests
share them. A secret's value (a no_log option) is never part of a message, nor is a URL that carries
credentials.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Iterable, Mapping
from re import _parser as sre_parse  # the parser re compiles with; sre_parse is its deprecated alias
from typing import Any
from urllib.parse import urlsplit

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.glm5.deploy.plugins.module_utils.judge_probes import ProbeError, normalize_probe
from ansible_collections.glm5.deploy.plugins.module_utils.long_context import (
    MIN_WORDS as RECALL_MIN_WORDS,
)
from ansible_collections.glm5.deploy.plugins.module_utils.long_context import OPTIONS as RECALL_OPTIONS

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


# The fleet's keys, each of which opens one door (docs/security.md).
KEY_DOORS = {
    "sglang_router_api_key": "the clients' key: the router's edge",
    "sglang_server_api_key": "the nodes' API: the router, the guard and the checks",
    "sglang_server_admin_api_key": "the nodes' admin endpoints",
    "sglang_router_admin_key": "the router's control plane",
}
# The keys the router's edge (nginx) writes into its configuration, as header strings it compares or sets: the
# characters of base64, hex and URL-safe tokens, nothing nginx would read as a quote, a variable or an escape.
EDGE_KEY_RE = re.compile(r"[A-Za-z0-9._~+/=-]+")
EDGE_KEYS = ("sglang_router_api_key", "sglang_server_api_key")


def key_sharing_problems(keys: Mapping[str, Iterable[str]]) -> list[str]:
    """Two doors with one key: ``keys`` maps each key variable to the values the inventory's hosts give it;
    a value held by two variables is refused, naming both (never the value). Empty values are not keys."""
    held = {name: {str(v) for v in values if str(v or "")} for name, values in keys.items()}
    problems = []
    names = list(held)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            if held[first] & held[second]:
                one, other = (f"{n} ({KEY_DOORS.get(n, 'a key')})" for n in (first, second))
                problems.append(
                    f"{one} and {other} "
                    "hold the same value: each key opens one door, so a holder of one could open the other. "
                    "Give each its own value from a vault (the values are not shown)"
                )
    return problems


def edge_key_problems(keys: Mapping[str, Iterable[str]]) -> list[str]:
    """The keys the router's edge writes into its nginx configuration (the clients' keys it accepts, the
    nodes' key it sends on) must be tokens: letters, digits and ``._~+/=-``. A value that is no key at all
    (whitespace, not a string) is secret_problems' to name. Never shows a key."""
    bad = [
        name
        for name in EDGE_KEYS
        if any(
            isinstance(v, str) and v and not _key_problems(name, v) and not EDGE_KEY_RE.fullmatch(v)
            for v in keys.get(name, [])
        )
    ]
    return [
        f"{name} holds a character other than letters, digits and ._~+/=- : the router's edge (nginx) "
        "compares and sends it as a header in its configuration; use a token such as `openssl rand -hex 32` "
        "(the value is not shown)"
        for name in bad
    ]


def fleet_key_problems(keys: Mapping[str, Iterable[str]]) -> list[str]:
    """Every rule over the fleet's keys, from the values the inventory gives each key variable on the hosts
    that hold it: one door, one key (KEY_DOORS; the clients' key too, since the router's edge puts the nodes'
    key in its place), and the edge's keys are tokens."""
    return key_sharing_problems({name: keys.get(name, []) for name in KEY_DOORS}) + edge_key_problems(keys)


REPO_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def checkpoint_problems(repo: str, revision: str, source_path: str = "") -> list[str]:
    """The checkpoint's repository must be org/name and its revision pinned (unless copied from a path)."""
    if source_path:
        return []
    problems = []
    if not REPO_RE.fullmatch(str(repo)):
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


def lost_gpu_problems(
    now: Mapping[str, Any],
    recorded: Mapping[str, Any] | None,
    *,
    host: str,
    tp_size: int | None = None,
    tp_var: str = "preflight_tp_size",
) -> list[str]:
    """Before a replica leaves the router: the node still has the GPUs it was deployed with (the facts
    preflight recorded, /etc/ansible/facts.d/glm5_gpu.fact), of the same architecture. ``recorded`` None: no
    record (preflight_record_facts false, or the file removed): only ``tp_size``, the GPUs the node must
    have for its share of the replica, is checked."""
    recorded = recorded or {}
    kept = "The replica was not taken out of the router and still serves on its current release"
    missing = "a GPU is missing or fell off the bus (nvidia-smi, dmesg for Xid errors)"
    problems = []
    count, had = int(now.get("count") or 0), int(recorded.get("count") or 0)
    if count < had:
        problems.append(
            f"{host} sees {count} GPU(s) where it was deployed with {had}: {missing}. {kept}; fix the node, "
            "or leave it out of the rollout with --limit"
        )
    arch, had_arch = str(now.get("arch") or ""), str(recorded.get("arch") or "")
    if had_arch and arch != had_arch:
        problems.append(
            f"{host} reports GPU architecture {arch or 'none'} where it was deployed on {had_arch}. {kept}; "
            "run site.yml on it (preflight reads its GPUs again)"
        )
    if not problems and tp_size and count < int(tp_size):
        problems.append(f"{host} sees {count} GPU(s), fewer than {tp_var} ({tp_size}): {missing}. {kept}")
    return problems


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


# PEM values (a TLS certificate, its private key, a CA bundle): several lines, between BEGIN and END markers.
PEM_KINDS = {"_certificate": "CERTIFICATE", "_ca_bundle": "CERTIFICATE", "_private_key": "PRIVATE KEY"}
PEM_RE = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s[A-Za-z0-9+/=\s]+-----END \1-----")


def pem_kind(name: str) -> str | None:
    """The PEM block a variable holds, by the end of its name (None: not a PEM variable)."""
    return next((kind for suffix, kind in PEM_KINDS.items() if name.endswith(suffix)), None)


def pem_problems(name: str, value: Any) -> list[str]:
    """A PEM variable, when set, holds at least one block of its kind and nothing but PEM blocks. Never shows
    the value."""
    kind = pem_kind(name)
    if kind is None or value in (None, ""):
        return []
    if not isinstance(value, str):
        return [f"{name} must be PEM text, got a {type(value).__name__}"]
    blocks = [m.group(1) for m in PEM_RE.finditer(value)]
    rest = PEM_RE.sub("", value).strip()
    if not any(kind in block for block in blocks) or rest:
        return [
            f"{name} must be PEM text: one or more '-----BEGIN ...{kind}-----' blocks and nothing else "
            "(the value is not shown)"
        ]
    return []


def _key_problems(name: str, value: Any) -> list[str]:
    if not isinstance(value, str):
        return [f"{name} must be a string (a key from a vault), got a {type(value).__name__}"]
    if any(ch.isspace() for ch in value):
        return [
            f"{name} must be printable ASCII without whitespace (a key or token from a vault); it "
            "holds a space, tab or line break (the value is not shown)"
        ]
    if any(not 33 <= ord(ch) <= 126 for ch in value):
        return [
            f"{name} must be printable ASCII without whitespace (a key or token from a vault); it "
            "holds a character outside printable ASCII (the value is not shown)"
        ]
    return []


def secret_problems(options: Mapping[str, Any], provided: Mapping[str, Any]) -> list[str]:
    """Secret options (no_log) must be strings of printable ASCII without whitespace (a key or token from a
    vault, which goes into headers, environment and configuration files as it is), or PEM text where the
    name says so (pem_problems); a secret list option, a list of such keys. The message names the variable
    and what is wrong, never the value."""
    problems = []
    for name, spec in options.items():
        if not (spec or {}).get("no_log", False) or name not in provided or provided[name] is None:
            continue
        value = provided[name]
        if pem_kind(name):
            problems += pem_problems(name, value)
        elif spec.get("type") == "list" and isinstance(value, list):
            problems += [p for i, item in enumerate(value) for p in _key_problems(f"{name}[{i}]", item)]
        else:
            problems += _key_problems(name, value)
    return problems


ADMIN_KEY_MIN = 16


def admin_key_problems(key: Any, *, var: str) -> list[str]:
    """The router's admin key: required, 16 or more characters and no colon (smg reads its control-plane key
    as name:role:user:key, roles/sglang_router/vars/main.yml). Never shows the key."""
    if not isinstance(key, str):
        return []  # secret_problems names a key that is not a string
    if not key:
        return [
            f"{var} is empty: the router's control plane (draining and registering workers) needs it; set it "
            f"from a vault ({ADMIN_KEY_MIN} or more characters, no colon)"
        ]
    problems = []
    if len(key) < ADMIN_KEY_MIN:
        problems.append(f"{var} is shorter than {ADMIN_KEY_MIN} characters (the value is not shown)")
    if ":" in key:
        problems.append(
            f"{var} holds a colon, which smg reads as a separator of its control-plane key "
            "(name:role:user:key); use a key without one (the value is not shown)"
        )
    return problems


# The router's edge: TLS with a certificate and its key, plain HTTP only when the inventory says so.
EDGE_CERT, EDGE_KEY, EDGE_PLAIN = (
    "sglang_router_tls_certificate",
    "sglang_router_tls_private_key",
    "sglang_router_edge_plain_http",
)


def edge_tls_problems(certificate: Any, private_key: Any, plain_http: Any, *, port: Any = 30000) -> list[str]:
    """The router's edge speaks TLS (a certificate and its key) or, only when the inventory says so
    (sglang_router_edge_plain_http true), plain HTTP. Refused: neither a certificate nor plain HTTP asked for;
    half a pair (a key without its certificate would be plain HTTP without a word); a pair and plain HTTP
    asked for. Never shows the certificate or the key."""
    has_cert = isinstance(certificate, str) and bool(certificate.strip())
    has_key = isinstance(private_key, str) and bool(private_key.strip())
    plain = boolean(plain_http, strict=False)  # as Ansible reads a bool option (yes, on, 1, ...)
    if has_cert != has_key:
        given, missing = (EDGE_CERT, EDGE_KEY) if has_cert else (EDGE_KEY, EDGE_CERT)
        return [
            f"{given} is set but {missing} is empty: the router's edge speaks TLS with both. Set {missing} "
            f"(PEM; the key from a vault), or empty both and set {EDGE_PLAIN}: true to serve plain HTTP on "
            "purpose (the values are not shown)"
        ]
    if has_cert and plain:
        return [
            f"{EDGE_PLAIN} is true, but {EDGE_CERT} and {EDGE_KEY} are set, so the edge would speak TLS. Set "
            f"{EDGE_PLAIN}: false to keep TLS, or empty the certificate and its key to serve plain HTTP"
        ]
    if not has_cert and not plain:
        return [
            f"{EDGE_CERT} and {EDGE_KEY} are empty and {EDGE_PLAIN} is false: the router's edge would serve "
            f"clients, their keys and their prompts in plain HTTP on sglang_router_port ({port}). Give it a "
            f"certificate and its key ({EDGE_CERT}, {EDGE_KEY} from a vault; docs/security.md 'TLS at the "
            f"edge'), or set {EDGE_PLAIN}: true to serve plain HTTP on purpose"
        ]
    return []


# --------------------------------------------------------------------------------------------------------
# Inputs mean what they say: one-line values, hosts, URLs, positive durations, probes
# --------------------------------------------------------------------------------------------------------

LINE_BREAKS = ("\n", "\r", "\x00")
HOST_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
USERINFO_RE = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://)?[^/?#@]*@")
# Variables holding a URL (by the end of their name), a URL or a directory (pip's --find-links), or URLs.
URL_SUFFIXES = ("_url", "_endpoint", "_index")
LOCATION_SUFFIXES = ("_wheelhouse", "_find_links")
URL_LISTS = frozenset({"sglang_router_workers", "sglang_guard_replicas"})
# Numbers that must be more than 0: durations (seconds) and counts a check cannot do without.
POSITIVE_SUFFIXES = (
    "_timeout",
    "_interval",
    "_delay",
    "_fail_after",
    "_recover_after",
    "_failure_threshold",
    "_breaker_failures",
    "_backoff_ms",
    "_max_workers",
    "_concurrency",
)
# Retries may be 0: one attempt, none repeated.
NON_NEGATIVE_SUFFIXES = ("_retries",)
# A probe's answer budget: GLM-5 thinks for a few thousand tokens at most on a check's prompt; more than this
# is a typo that would hold a replica's check for many minutes.
PROBE_MAX_TOKENS = 32768
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The service environment the sglang_server role sets itself (roles/sglang_server/vars/main.yml), and why.
ROLE_OWNED_ENVIRONMENT = {
    "SGLANG_LOGGING_CONFIG_PATH": "the role's logging configuration keeps the API key out of the journal",
    "HF_HUB_OFFLINE": "the server reads only the checkpoint the model_checkpoint role verified",
    "HOME": "set sglang_server_home",
    "HF_HOME": "set sglang_server_home",
    "XDG_CACHE_HOME": "set sglang_server_home",
}


def _shown(value: Any, limit: int = 60) -> str:
    """A value for a message, JSON-quoted (a line break shows as \\n) and cut at ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any) -> float | None:
    """A number given as a number or a numeric string; None for anything else (bools included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def line_problems(name: str, value: Any) -> list[str]:
    """A one-line value (a host, a path, a repository id, a revision, a name) holds no line break or NUL."""
    if isinstance(value, str) and any(ch in value for ch in LINE_BREAKS):
        return [f"{name} holds a line break; it must be one line, got {_shown(value)}"]
    return []


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def host_problems(name: str, value: Any, *, port_var: str | None = None) -> list[str]:
    """A host variable holds a host: a DNS name or an IP address, not host:port, a URL or a path. Empty is
    left to the role (its default)."""
    if not isinstance(value, str) or not value or _is_ip(value) or HOST_RE.fullmatch(value):
        return []
    if "://" in value:
        what = "a URL"
    elif ":" in value:
        what = "host:port"
    else:
        what = "something else"
    port = f" (the port is {port_var})" if port_var else ""
    return [
        f"{name} must be a host name or address, not host:port or a URL; got {_shown(value)}, {what}{port}"
    ]


def url_problems(name: str, value: Any, *, directory_ok: bool = False) -> list[str]:
    """A URL variable holds an http(s) URL without credentials (user:password@ would be logged and written
    to files; such a value is never shown). ``directory_ok``: pip's --find-links, where a file:// URL or an
    absolute directory also does."""
    if not isinstance(value, str) or not value:
        return []
    if USERINFO_RE.match(value):
        return [
            f"{name} carries a user name or password before the host (user:password@): a URL is logged and "
            "written into files, so it never holds credentials; remove them (the value is not shown)"
        ]
    if any(ch.isspace() for ch in value):
        return [f"{name} holds whitespace; a URL has none, got {_shown(value)}"]
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        return [f"{name} is not a URL ({exc}): {_shown(value)}"]
    schemes = ("http", "https", "file") if directory_ok else ("http", "https")
    if "://" not in value and directory_ok and value.startswith("/"):
        return []
    if parts.scheme not in schemes or (parts.scheme != "file" and not parts.netloc):
        wanted = "an http(s) or file:// URL, or an absolute directory" if directory_ok else "an http(s) URL"
        return [f"{name} must be {wanted} (http://host[:port]/...); got {_shown(value)}"]
    return []


def number_problems(name: str, value: Any) -> list[str]:
    """Durations, intervals and counts (by the end of their name) that must be more than 0 (retries: 0 or
    more; a recall probe's words, long-context, mid-length or prefix-reuse: 0 or at least their minimum). A
    value that is not a number is left to the argument spec."""
    number = _number(value)
    if number is None:
        return []
    if name.endswith(POSITIVE_SUFFIXES) and number <= 0:
        return [f"{name} must be positive (more than 0), got {_shown(value)}"]
    if name.endswith(NON_NEGATIVE_SUFFIXES) and number < 0:
        return [f"{name} must be 0 or more, got {_shown(value)}"]
    for probe, option in RECALL_OPTIONS.items():
        if name.endswith(f"_{option}") and number != 0 and number < RECALL_MIN_WORDS:
            words = f"{RECALL_MIN_WORDS} words or more"
            return [f"{name} must be 0 (no {probe} probe) or {words}, got {_shown(value)}"]
    return []


def environment_problems(name: str, environment: Any) -> list[str]:
    """A service environment: variable names, one-line values, and none of the variables the role sets."""
    if not isinstance(environment, Mapping):
        return []  # the argument spec names a value that is not a mapping
    problems = []
    for key, value in environment.items():
        where = f"{name}.{key}"
        if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
            problems.append(f"{where} is not an environment variable name (letters, digits, _)")
        elif key in ROLE_OWNED_ENVIRONMENT:
            problems.append(f"{where}: the role owns this; {ROLE_OWNED_ENVIRONMENT[key]}")
        elif isinstance(value, str) and any(ch in value for ch in LINE_BREAKS):
            problems.append(f"{where} holds a line break; an environment file's value is one line")
    return problems


def probe_problems(name: str, probes: Any) -> list[str]:
    """Probes (sglang_validate_probes, sglang_guard_probes) the inference check can ask: each a mapping with a
    unique non-empty name, a non-empty prompt (or messages), max_tokens from 1 to PROBE_MAX_TOKENS and an
    expect that compiles; then the rest of the inference check's own rules. Empty: the check's defaults."""
    if not isinstance(probes, list):
        return []  # the argument spec names a value that is not a list
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, probe in enumerate(probes):
        where = f"{name}[{index}]"
        if not isinstance(probe, Mapping):
            problems.append(f"{where} must be a mapping with a name and a prompt (or messages)")
            continue
        own = []
        probe_name = probe.get("name")
        if not isinstance(probe_name, str) or not probe_name.strip():
            own.append(f"{where}.name must be a non-empty string")
        elif probe_name in seen:
            own.append(
                f"{where}.name {_shown(probe_name)} is used twice (also {name}[{seen[probe_name]}]); "
                "probe names must be unique"
            )
        else:
            seen[probe_name] = index
        prompt = probe.get("prompt")
        if "prompt" in probe and (not isinstance(prompt, str) or not prompt.strip()):
            own.append(f"{where}.prompt is empty; give the question the check asks")
        max_tokens = probe.get("max_tokens")
        if max_tokens is not None and (
            isinstance(max_tokens, bool)
            or not isinstance(max_tokens, int)
            or not 1 <= max_tokens <= PROBE_MAX_TOKENS
        ):
            own.append(
                f"{where}.max_tokens must be a whole number from 1 to {PROBE_MAX_TOKENS}, "
                f"got {_shown(max_tokens)}"
            )
        expect = probe.get("expect")
        if expect is not None:
            try:
                re.compile(str(expect))
            except re.error as exc:
                own.append(f"{where}.expect is not a valid regular expression ({exc}): {_shown(expect)}")
            else:
                own += expect_problems(f"{where}.expect", expect)
        if not own:
            try:
                normalize_probe(probe, index)
            except ProbeError as exc:
                own.append(f"{where}: {exc}")
        problems.extend(own)
    return problems


# What the judge reads a probe's expect against (module_utils/judge_verdict.py): the answer's content, with
# re.search, only when the content is not blank (a blank answer fails before expect is read). Texts unlike
# each other: a pattern that finds itself in all of them finds itself in any answer.
EXPECT_SAMPLES = ("", "4", "zq", "The answer is 4.", "no\nway", "\x00", "\u00e9\u4e00")
_BLANK_CATEGORIES = frozenset(
    {"CATEGORY_SPACE", "CATEGORY_LINEBREAK", "CATEGORY_UNI_SPACE", "CATEGORY_UNI_LINEBREAK"}
)


def _blank_item(op: Any, av: Any) -> bool:
    """Whether one item of a parsed pattern can match nothing but whitespace (or nothing)."""
    name = str(op)
    if name == "LITERAL":
        return chr(av).isspace()
    if name == "IN":
        return all(
            (str(o) == "LITERAL" and chr(a).isspace())
            or (str(o) == "CATEGORY" and str(a) in _BLANK_CATEGORIES)
            for o, a in av
        )
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        return _blank_items(av[2])
    if name == "SUBPATTERN":
        return _blank_items(av[-1])
    if name == "ATOMIC_GROUP":
        return _blank_items(av)
    if name == "BRANCH":
        return all(_blank_items(branch) for branch in av[1])
    return False


def _blank_items(items: Iterable[tuple[Any, Any]]) -> bool:
    return all(_blank_item(op, av) for op, av in items)


def matches_only_blank(pattern: str) -> bool:
    """Whether a regular expression, searched in a text, can match only a text that is blank: anchored at both
    ends (^ or \\A, $ or \\Z, without MULTILINE) around nothing but whitespace."""
    try:
        parsed = sre_parse.parse(pattern)
    except re.error:
        return False
    if parsed.state.flags & re.MULTILINE:
        return False
    items = list(parsed)
    starts = {"AT_BEGINNING", "AT_BEGINNING_STRING"}
    ends = {"AT_END", "AT_END_STRING"}
    if len(items) < 2 or str(items[0][0]) != "AT" or str(items[-1][0]) != "AT":
        return False
    if str(items[0][1]) not in starts or str(items[-1][1]) not in ends:
        return False
    return _blank_items(items[1:-1])


def expect_problems(where: str, expect: Any) -> list[str]:
    """A probe's expect (a regular expression the answer must match) that judges nothing, or that no answer
    can pass: one every text matches (an empty pattern, .*), or one only blank text matches (^$, ^\\s*$),
    which the judge fails before it reads expect. Patterns that do not compile are probe_problems'."""
    if not isinstance(expect, str):
        return []
    try:
        compiled = re.compile(expect)
    except re.error:
        return []
    if all(compiled.search(text) for text in EXPECT_SAMPLES):
        return [
            f"{where} is {_shown(expect)}, which every answer matches, so it judges nothing; give the "
            "pattern a right answer matches (re.search on the answer's content), or leave expect out"
        ]
    if matches_only_blank(expect):
        return [
            f"{where} is {_shown(expect)}, which only blank text matches, and a blank answer fails before "
            "expect is read: no answer could pass this probe. Give the pattern a right answer matches"
        ]
    return []


def _port_var(name: str, options: Mapping[str, Any]) -> str | None:
    for candidate in (name.removesuffix("_advertise_host") + "_port", name.removesuffix("_host") + "_port"):
        if candidate in options:
            return candidate
    return None


def _text_problems(where: str, value: Any, name: str, options: Mapping[str, Any]) -> list[str]:
    """One string of option ``name`` (at ``where``): one line, then a host or a URL when its name says so. A
    host or URL with credentials is refused first, so that no other message shows them."""
    if not isinstance(value, str):
        return []
    location = name.endswith(LOCATION_SUFFIXES)
    url = location or name.endswith(URL_SUFFIXES) or name in URL_LISTS
    if (url or name.endswith("_host")) and USERINFO_RE.match(value):
        return url_problems(where, value)
    problems = line_problems(where, value)
    if problems:
        return problems
    if name.endswith("_host"):
        return host_problems(where, value, port_var=_port_var(name, options))
    if url:
        return url_problems(where, value, directory_ok=location)
    return []


def value_problems(options: Mapping[str, Any], provided: Mapping[str, Any]) -> list[str]:
    """Values that do not mean what they say, by each option's type (its argument spec) and name: one-line
    strings; hosts (*_host) that are hosts; URLs (*_url, *_endpoint, *_index, wheelhouses) with an http(s)
    scheme and no credentials; positive durations and counts (*_timeout, *_interval, ...); probes
    (*_probes); service environments (*_environment). Secrets (no_log) are secret_problems' and
    sglang_settings is settings_problems'."""
    problems: list[str] = []
    for name, spec in options.items():
        spec = spec or {}
        if (
            spec.get("no_log", False)
            or name not in provided
            or provided[name] is None
            or name == "sglang_settings"
        ):
            continue
        value = provided[name]
        kind = spec.get("type", "str")
        if pem_kind(name):
            problems += pem_problems(name, value)
        elif name.endswith("_probes"):
            problems += probe_problems(name, value)
        elif name.endswith("_environment"):
            problems += environment_problems(name, value)
        elif kind in ("int", "float"):
            problems += number_problems(name, value)
        elif kind == "list" and isinstance(value, list):
            for index, item in enumerate(value):
                problems += _text_problems(f"{name}[{index}]", item, name, options)
        elif kind in ("str", "path"):
            problems += _text_problems(name, value, name, options)
    return problems


# --------------------------------------------------------------------------------------------------------
# sglang_settings: keys the roles own, values sglang would misread, sglang's own ranges
# --------------------------------------------------------------------------------------------------------

# sglang's parser dest -> what to set instead. The sglang_server role renders these itself
# (roles/sglang_server/vars/main.yml: __sglang_server_node_settings, the replica's settings from
# fleet_topology.node_settings, and --config for the API key); a value in sglang_settings would be dropped
# or fight the role's.
ROLE_OWNED_SETTINGS = {
    "model_path": "set sglang_server_model_path",
    "host": "set sglang_server_host",
    "port": "set sglang_server_port",
    "served_model_name": "set sglang_server_served_model_name",
    "api_key": "set sglang_server_api_key (from a vault; the role passes it in a file, not as an argument)",
    "admin_api_key": (
        "set sglang_server_admin_api_key (from a vault; the role passes it in a file, not as an argument)"
    ),
    "config": "the role passes --config itself (the file with sglang_server_api_key and its admin key)",
    "nnodes": "put the replica's nodes in an inventory group sglang_replica_<name> (nnodes is its size)",
    "node_rank": "a node's rank is its place in its sglang_replica_<name> group (rank 0 first)",
    "dist_init_addr": "it is rank 0's sglang_server_advertise_host with sglang_server_dist_port",
    "ssl_certfile": "set sglang_server_tls_certificate (the role writes it to a file and passes its path)",
    "ssl_keyfile": "set sglang_server_tls_private_key (from a vault; the role writes it root:sglang 0640)",
    "ssl_ca_certs": "set sglang_server_ca_bundle (the role writes it to a file and passes its path)",
}
# Fractions in (0, 1] (sglang 0.5.23 srt/arg_groups/fields: schedule.py "the fraction of the memory used for
# static allocation", swa_full_tokens_ratio "should be between 0 and 1"; memory.py "fraction of the available
# host memory").
SETTING_FRACTIONS = frozenset(
    {"mem_fraction_static", "swa_full_tokens_ratio", "hicache_host_memory_fraction"}
)
# Sizes and counts that are positive when given (fields/parallel.py, schedule.py, model.py, exec_.py).
SETTING_POSITIVE = frozenset(
    {
        "tp_size",
        "dp_size",
        "pp_size",
        "ep_size",
        "max_running_requests",
        "max_queued_requests",
        "max_total_tokens",
        "max_prefill_tokens",
        "prefill_max_requests",
        "context_length",
        "page_size",
        "cuda_graph_max_bs",
        "cuda_graph_max_bs_decode",
        "cuda_graph_max_bs_prefill",
        "stream_interval",
    }
)
# Positive, or this value with its meaning (fields/schedule.py: "Setting this to -1 means disabling chunked
# prefill").
SETTING_POSITIVE_OR = {"chunked_prefill_size": (-1, "-1 turns chunked prefill off")}
# What argparse takes for a negative number rather than an option (argparse._negative_number_matcher).
NEGATIVE_NUMBER_RE = re.compile(r"-\d+|-\d*\.\d+")
_HUMAN_INT_RE = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_HUMAN_UNITS = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def setting_number(value: Any) -> float | None:
    """A setting's number as sglang reads it: a number, a numeric string or a human-readable int ('128k',
    '1Mi', sglang's human_readable_int); None for anything else (sglang's own parser judges it)."""
    number = _number(value)
    if number is not None or not isinstance(value, str):
        return number
    match = _HUMAN_INT_RE.fullmatch(value.strip())
    return float(match.group(1)) * _HUMAN_UNITS[match.group(2)] if match else None


def _word_problems(where: str, word: Any) -> list[str]:
    """One word of a flag's value on the command line: one line, and not something sglang reads as a flag."""
    if not isinstance(word, str):
        return []
    if any(ch in word for ch in LINE_BREAKS):
        return [f"{where} holds a line break; a flag's value is one line of the service's command line"]
    if word.startswith("-") and not NEGATIVE_NUMBER_RE.fullmatch(word):
        return [
            f"{where} is {_shown(word)}, which begins with a dash: sglang would take it for an option of its "
            "own. Give only the value, and set each flag as its own sglang_settings key"
        ]
    return []


def settings_problems(
    settings: Any,
    *,
    dests: Mapping[str, Iterable[str]] | None = None,
    nnodes: int = 1,
    replica: str = "",
    preflight_tp_size: int | None = None,
) -> list[str]:
    """sglang_settings that do not mean what they say.

    - a key the role owns (``dests``: key -> what it sets in sglang's parser, so an alias such as ``model``
      counts as model_path), with the variable to set instead;
    - a value or list item that begins with a dash (it would be an option of its own on the command line)
      or holds a line break;
    - a fraction outside (0, 1], a size or count that is not positive;
    - tp_size that the replica's ``nnodes`` cannot share evenly, or whose share per node is more than the
      GPUs preflight checks each node for (``preflight_tp_size``).

    None values are skipped (null removes a profile setting); values that are not numbers are left to sglang's
    parser, which the roles run before a service starts.
    """
    if not isinstance(settings, Mapping):
        return []  # the argument spec and the sglang role name a value that is not a mapping
    problems: list[str] = []
    for key, value in settings.items():
        if value is None or not isinstance(key, str):
            continue
        where = f"sglang_settings.{key}"
        sets = set((dests or {}).get(key) or ()) | {key}
        owned = sorted(sets & set(ROLE_OWNED_SETTINGS))
        if owned:
            alias = "" if owned[0] == key else f" (it sets {owned[0]})"
            problems.append(f"{where}: the role owns this{alias}; {ROLE_OWNED_SETTINGS[owned[0]]}")
            continue
        if isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                problems += _word_problems(f"{where}[{index}]", item)
        else:
            problems += _word_problems(where, value)
        number = setting_number(value)
        if number is None:
            continue
        if sets & SETTING_FRACTIONS and not 0 < number <= 1:
            problems.append(f"{where} must be a fraction in (0, 1], got {_shown(value)}")
        for dest in sorted(sets & set(SETTING_POSITIVE_OR)):
            allowed, meaning = SETTING_POSITIVE_OR[dest]
            if number <= 0 and number != allowed:
                problems.append(f"{where} must be positive or {allowed} ({meaning}), got {_shown(value)}")
        if sets & SETTING_POSITIVE and number <= 0:
            problems.append(f"{where} must be positive, got {_shown(value)}")
        elif "tp_size" in sets and number.is_integer():
            problems += _tp_problems(where, int(number), nnodes, replica, preflight_tp_size)
    return problems


def _tp_problems(
    where: str, tp_size: int, nnodes: int, replica: str, preflight_tp_size: int | None
) -> list[str]:
    """tp_size over a replica's nodes: an even share each, at most the GPUs preflight checks each node for."""
    nodes = max(int(nnodes), 1)
    if tp_size % nodes:
        return [
            f"{where} is {tp_size}, which the {nodes} nodes of replica {replica} (inventory group "
            f"sglang_replica_{replica}) cannot share evenly; use a multiple of {nodes}"
        ]
    share = tp_size // nodes
    if preflight_tp_size is not None and share > int(preflight_tp_size):
        return [
            f"{where} is {tp_size}, so each node of the replica ({nodes} node(s)) runs {share} ranks, one "
            f"per GPU, but preflight checks each node's GPUs against preflight_tp_size {preflight_tp_size}; "
            f"set preflight_tp_size to {share} (or lower {where})"
        ]
    return []


# --------------------------------------------------------------------------------------------------------
# Settings whose limit the model's own configuration sets
# --------------------------------------------------------------------------------------------------------

# The limits of a checkpoint's config.json that sglang holds a launch to, for the checkpoints deployed by
# name. GLM-5 (model type glm_moe_dsa): max_position_embeddings 202752, num_attention_heads 64,
# n_routed_experts 256; source: transformers' GlmMoeDsaConfig (models/glm_moe_dsa), whose defaults are
# zai-org/GLM-5's ("a similar configuration to that of the GLM-5"); the FP8 and NVFP4 checkpoints quantize the
# same model. A checkpoint not named here (the lab's tiny model) is left to sglang.
_GLM5_LIMITS = {"max_position_embeddings": 202752, "num_attention_heads": 64, "n_routed_experts": 256}
MODEL_LIMITS = {
    repo.lower(): _GLM5_LIMITS for repo in ("nvidia/GLM-5-NVFP4", "zai-org/GLM-5", "zai-org/GLM-5-FP8")
}
# sglang 0.5.23 (srt/configs/model_config.py) refuses a context_length above the model's unless this is set.
LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
_ENV_TRUE = frozenset({"1", "true", "yes", "y", "on"})


def model_limit_problems(
    settings: Any,
    repo: Any,
    environment: Mapping[str, Any] | None = None,
    *,
    dests: Mapping[str, Iterable[str]] | None = None,
) -> list[str]:
    """sglang_settings past what the checkpoint's own configuration allows (MODEL_LIMITS), each of which
    sglang refuses when the server starts: context_length above max_position_embeddings (unless the service
    environment sets SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN); an attention tensor-parallel width (tp_size,
    or tp_size / dp_size with enable_dp_attention) that does not divide the attention heads; ep_size that does
    not divide the routed experts. ``dests``: each key's parser dests (aliases), as settings_problems takes
    them."""
    limits = MODEL_LIMITS.get(str(repo or "").strip().lower())
    if limits is None or not isinstance(settings, Mapping):
        return []
    found: dict[str, tuple[str, Any]] = {}
    for key, value in settings.items():
        if value is None or not isinstance(key, str):
            continue
        for dest in set((dests or {}).get(key) or ()) | {key}:
            found.setdefault(dest, (f"sglang_settings.{key}", value))
    problems = []
    env = {str(k): str(v).strip().lower() for k, v in (environment or {}).items()}
    if "context_length" in found:
        where, value = found["context_length"]
        number = setting_number(value)
        most = limits["max_position_embeddings"]
        if number is not None and number > most and env.get(LONGER_CONTEXT_ENV) not in _ENV_TRUE:
            problems.append(
                f"{where} is {_shown(value)}, more than the {most} positions {repo} has "
                f"(max_position_embeddings of its config.json): sglang refuses to start. Use {most} or less"
            )
    if "tp_size" in found:
        where, value = found["tp_size"]
        tp = setting_number(value)
        dp_attention = str(found.get("enable_dp_attention", ("", False))[1]).strip().lower() in _ENV_TRUE
        dp = setting_number(found.get("dp_size", ("", 1))[1]) if dp_attention else 1.0
        heads = limits["num_attention_heads"]
        if tp and tp.is_integer() and tp > 0 and dp and dp.is_integer() and dp > 0 and int(tp) % int(dp) == 0:
            width = int(tp) // int(dp)
            if heads % width:
                split = f"tp_size / dp_size ({width})" if dp_attention and dp != 1 else f"tp_size ({width})"
                problems.append(
                    f"{where} is {_shown(value)}: {repo}'s {heads} attention heads do not split evenly over "
                    f"the attention's tensor-parallel width, {split}; sglang refuses to start. Use a width "
                    f"that divides {heads}"
                )
    if "ep_size" in found:
        where, value = found["ep_size"]
        ep = setting_number(value)
        experts = limits["n_routed_experts"]
        if ep and ep.is_integer() and ep > 0 and experts % int(ep):
            problems.append(
                f"{where} is {_shown(value)}, which does not divide the {experts} routed experts of {repo}: "
                f"sglang refuses to start. Use a divisor of {experts}"
            )
    return problems


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
        number = _number(value)
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
