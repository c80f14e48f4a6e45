"""Inputs checks, values mean what they say: one-line values, hosts, URLs, positive durations, probes.

Each check returns a list of problems, one sentence each, that names the variable to change; an empty list
means the input is fine. Pure functions over plain data, shared by the preflight role's filters
(plugins/filter/inputs.py) and the unit tests. A secret's value (a no_log option) is never part of a
message, nor is a URL that carries credentials.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from re import _parser as sre_parse  # the parser re compiles with; sre_parse is its deprecated alias
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.glm5.deploy.plugins.module_utils.inputs_keys import pem_kind, pem_problems
from ansible_collections.glm5.deploy.plugins.module_utils.judge_probes import ProbeError, normalize_probe
from ansible_collections.glm5.deploy.plugins.module_utils.long_context import (
    MIN_WORDS as RECALL_MIN_WORDS,
)
from ansible_collections.glm5.deploy.plugins.module_utils.long_context import OPTIONS as RECALL_OPTIONS


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


def shown(value: Any, limit: int = 60) -> str:
    """A value for a message, JSON-quoted (a line break shows as \\n) and cut at ``limit`` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def numeric(value: Any) -> float | None:
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
        return [f"{name} holds a line break; it must be one line, got {shown(value)}"]
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
        f"{name} must be a host name or address, not host:port or a URL; got {shown(value)}, {what}{port}"
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
        return [f"{name} holds whitespace; a URL has none, got {shown(value)}"]
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        return [f"{name} is not a URL ({exc}): {shown(value)}"]
    schemes = ("http", "https", "file") if directory_ok else ("http", "https")
    if "://" not in value and directory_ok and value.startswith("/"):
        return []
    if parts.scheme not in schemes or (parts.scheme != "file" and not parts.netloc):
        wanted = "an http(s) or file:// URL, or an absolute directory" if directory_ok else "an http(s) URL"
        return [f"{name} must be {wanted} (http://host[:port]/...); got {shown(value)}"]
    return []


def number_problems(name: str, value: Any) -> list[str]:
    """Durations, intervals and counts (by the end of their name) that must be more than 0 (retries: 0 or
    more; a recall probe's words, long-context, mid-length or prefix-reuse: 0 or at least their minimum). A
    value that is not a number is left to the argument spec."""
    number = numeric(value)
    if number is None:
        return []
    if name.endswith(POSITIVE_SUFFIXES) and number <= 0:
        return [f"{name} must be positive (more than 0), got {shown(value)}"]
    if name.endswith(NON_NEGATIVE_SUFFIXES) and number < 0:
        return [f"{name} must be 0 or more, got {shown(value)}"]
    for probe, option in RECALL_OPTIONS.items():
        if name.endswith(f"_{option}") and number != 0 and number < RECALL_MIN_WORDS:
            words = f"{RECALL_MIN_WORDS} words or more"
            return [f"{name} must be 0 (no {probe} probe) or {words}, got {shown(value)}"]
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
                f"{where}.name {shown(probe_name)} is used twice (also {name}[{seen[probe_name]}]); "
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
                f"got {shown(max_tokens)}"
            )
        expect = probe.get("expect")
        if expect is not None:
            try:
                re.compile(str(expect))
            except re.error as exc:
                own.append(f"{where}.expect is not a valid regular expression ({exc}): {shown(expect)}")
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
            f"{where} is {shown(expect)}, which every answer matches, so it judges nothing; give the "
            "pattern a right answer matches (re.search on the answer's content), or leave expect out"
        ]
    if matches_only_blank(expect):
        return [
            f"{where} is {shown(expect)}, which only blank text matches, and a blank answer fails before "
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
