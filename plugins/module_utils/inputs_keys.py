"""Inputs checks, the keys and certificates: one key per door, secrets, PEM values, the edge's TLS.

Each check returns a list of problems, one sentence each, that names the variable to change; an empty list
means the input is fine. Pure functions over plain data, shared by the preflight role's filters
(plugins/filter/inputs.py) and the unit tests. A secret's value (a no_log option) is never part of a
message, nor is a URL that carries credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean

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
