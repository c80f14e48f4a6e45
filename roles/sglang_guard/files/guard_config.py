"""sglang-guard's configuration (the JSON file the role writes) and its secrets (only from the environment).

Part of the guard daemon (sglang_guard.py, which runs the loop); installed beside it."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fleet_topology
import guard_policy
import judge_probes

ENV_ROUTER_ADMIN_KEY = "SGLANG_GUARD_ROUTER_ADMIN_KEY"
ENV_SERVER_API_KEY = "SGLANG_GUARD_SERVER_API_KEY"
ENV_WORKER_API_KEY = "SGLANG_GUARD_WORKER_API_KEY"

DEFAULT_CONFIG = "/etc/sglang-guard/guard.json"
CONFIG_DEFAULTS: dict[str, Any] = {
    "router_url": None,  # required
    "replicas": None,  # required
    "interval": 60,
    "fail_after": guard_policy.DEFAULT_FAIL_AFTER,
    "recover_after": guard_policy.DEFAULT_RECOVER_AFTER,
    "max_removal_fraction": guard_policy.DEFAULT_MAX_REMOVAL_FRACTION,
    "router_poll": 1,  # seconds between two reads of the router's worker list (the router health fast path)
    "workers": 64,  # replicas checked at once, at most
    "probes": None,  # None: judge_probes.DEFAULT_PROBES
    "timeout": 120,
    "logprobs": True,
    "model": None,  # None: the first id of each replica's GET /v1/models, every cycle
    "metrics_host": "127.0.0.1",
    "metrics_port": 29100,
    "hold_dir": "/var/lib/sglang-guard/holds",
    "state_file": "/var/lib/sglang-guard/state.json",
    "ca_bundle": None,  # None: the system's CAs, for an https router
    "replica_ca_bundle": None,  # None: the system's CAs, for https replicas (TLS to the nodes)
}


class ConfigError(ValueError):
    """The config file is missing, unreadable or invalid; the message says which key and why."""


# --- Configuration and secrets


@dataclass(frozen=True)
class Config:
    """guard.json, validated. Nothing in it is secret."""

    router_url: str
    replicas: tuple[str, ...]
    probes: tuple[judge_probes.Probe, ...]
    interval: float = 60
    fail_after: int = guard_policy.DEFAULT_FAIL_AFTER
    recover_after: int = guard_policy.DEFAULT_RECOVER_AFTER
    max_removal_fraction: float = guard_policy.DEFAULT_MAX_REMOVAL_FRACTION
    router_poll: float = 1
    workers: int = 64
    timeout: float = 120
    logprobs: bool = True
    model: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 29100
    hold_dir: str = "/var/lib/sglang-guard/holds"
    state_file: str = "/var/lib/sglang-guard/state.json"
    ca_bundle: str | None = None
    replica_ca_bundle: str | None = None

    @property
    def verify(self) -> bool | str:
        """The ``verify`` argument of requests to the router: its CA bundle when one is set."""
        return self.ca_bundle or True

    @property
    def replica_verify(self) -> bool | str:
        """The ``verify`` argument of requests to the replicas: the nodes' CA bundle when one is set."""
        return self.replica_ca_bundle or True

    @classmethod
    def from_mapping(cls, raw: object) -> Config:
        """Validate a parsed guard.json; None values mean the default. Raises ConfigError."""
        if not isinstance(raw, Mapping):
            raise ConfigError("the config must be a JSON object")
        unknown = sorted(str(key) for key in raw if key not in CONFIG_DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown keys {unknown}; allowed: {', '.join(CONFIG_DEFAULTS)}")
        data = {
            key: raw.get(key) if raw.get(key) is not None else CONFIG_DEFAULTS[key] for key in CONFIG_DEFAULTS
        }

        router_url = _url(data["router_url"], "router_url")
        replicas_raw = data["replicas"]
        if not isinstance(replicas_raw, list) or not replicas_raw:
            raise ConfigError("'replicas' must be a non-empty list of replica base URLs (http://host:port)")
        replicas = tuple(_url(item, f"replicas[{index}]") for index, item in enumerate(replicas_raw))
        if len(set(replicas)) != len(replicas):
            raise ConfigError("'replicas' lists a URL twice (after removing trailing slashes)")
        try:
            probes = tuple(judge_probes.normalize_probes(data["probes"]))
        except judge_probes.ProbeError as exc:
            raise ConfigError(f"probes: {exc}") from None
        try:
            guard_policy.check_thresholds(data["fail_after"], data["recover_after"])
        except guard_policy.PolicyError as exc:
            raise ConfigError(str(exc)) from None
        try:
            guard_policy.check_fraction(data["max_removal_fraction"])
        except guard_policy.PolicyError as exc:
            raise ConfigError(str(exc)) from None
        workers = data["workers"]
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ConfigError(f"'workers' must be an integer of at least 1, got {workers!r}")
        for key in ("interval", "timeout", "router_poll"):
            value = data[key]
            if not _is_number(value) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"'{key}' must be a number of seconds above 0, got {value!r}")
        if not isinstance(data["logprobs"], bool):
            raise ConfigError("'logprobs' must be true or false")
        for key in ("model", "ca_bundle", "replica_ca_bundle"):
            if data[key] is not None and (not isinstance(data[key], str) or not data[key]):
                raise ConfigError(f"'{key}' must be a non-empty string or null")
        for key in ("metrics_host", "hold_dir", "state_file"):
            if not isinstance(data[key], str) or not data[key]:
                raise ConfigError(f"'{key}' must be a non-empty string")
        port = data["metrics_port"]
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ConfigError(f"'metrics_port' must be a TCP port (0-65535), got {port!r}")
        return cls(
            router_url=router_url,
            replicas=replicas,
            probes=probes,
            interval=float(data["interval"]),
            fail_after=data["fail_after"],
            recover_after=data["recover_after"],
            max_removal_fraction=float(data["max_removal_fraction"]),
            router_poll=float(data["router_poll"]),
            workers=workers,
            timeout=float(data["timeout"]),
            logprobs=data["logprobs"],
            model=data["model"],
            metrics_host=data["metrics_host"],
            metrics_port=port,
            hold_dir=data["hold_dir"],
            state_file=data["state_file"],
            ca_bundle=data["ca_bundle"],
            replica_ca_bundle=data["replica_ca_bundle"],
        )


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _url(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip().startswith(("http://", "https://")):
        raise ConfigError(f"'{where}' must be an http:// or https:// URL, got {value!r}")
    return normalize_url(value)


def normalize_url(url: str) -> str:
    """A URL as the router and the policy compare them: stripped, without a trailing slash."""
    return fleet_topology._norm(url.strip())


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate guard.json."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from None
    return Config.from_mapping(raw)


@dataclass(frozen=True)
class Secrets:
    """The three keys, from the environment only. Their repr shows nothing."""

    router_admin_key: str = field(default="", repr=False)
    server_api_key: str = field(default="", repr=False)
    worker_api_key: str = field(default="", repr=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Secrets:
        """Read the ``SGLANG_GUARD_*`` variables (surrounding whitespace dropped)."""
        env = os.environ if environ is None else environ
        return cls(
            router_admin_key=env.get(ENV_ROUTER_ADMIN_KEY, "").strip(),
            server_api_key=env.get(ENV_SERVER_API_KEY, "").strip(),
            worker_api_key=env.get(ENV_WORKER_API_KEY, "").strip(),
        )

    def values(self) -> tuple[str, ...]:
        """The keys that are set, for scrubbing."""
        return tuple(v for v in (self.router_admin_key, self.server_api_key, self.worker_api_key) if v)

    def summary(self) -> str:
        """Which keys are set, never their values."""
        names = (
            ("router_admin_key", self.router_admin_key),
            ("server_api_key", self.server_api_key),
            ("worker_api_key", self.worker_api_key),
        )
        return " ".join(f"{name}={'set' if value else 'unset'}" for name, value in names)
