"""sglang-guard: ask every replica real questions on a schedule; take the bad ones out of the router.

A NaN-poisoned sglang keeps ``/health`` at 200 and answers ``!!!!``; neither sglang nor the router (smg) looks
at what a replica answers. This daemon runs on the router host. It:

1. reads the router's worker list (``GET /workers``, admin key) and the drain markers (holds) that the rolling
   update writes to ``hold_dir`` (one file per held replica, its URL on the first line) every ``router_poll``
   seconds (default 1: one request whatever the fleet's size);
2. asks each replica that is not held the inference-check probes (``judge_probes``) every ``interval``
   seconds on the replica's own schedule, at most ``workers`` replicas at once, straight at its
   ``/v1/chat/completions`` (not through the router), and judges the answers with ``judge_verdict``, the
   judge of the ``sglang_inference_check`` Ansible module, with the module's request shape and retries. A
   replica whose check is still running is not asked again, and no replica waits for another's answer;
3. lets ``guard_policy`` decide the moment a verdict arrives, and at every router poll (out after
   ``fail_after`` failed verdicts in a row, or at once when the router reports a replica's engine unhealthy;
   back after ``recover_after`` passes whoever took it out, so a router restarted empty is refilled; the one
   removal policy of the guard and the validate gate: degenerate answers always out, a probe every replica
   fails with sound answers suspected instead of the replicas, at most ``max_removal_fraction`` of the
   replicas out per interval, never the last healthy replica; never a held one);
4. calls the router (``DELETE /workers/{id}``, ``POST /workers``), writes one journal line per verdict,
   transition and alert to stdout, updates the Prometheus metrics (``glm5_guard_*``) and saves its state
   atomically.

When the router listing or the holds cannot be read, the replicas are still judged and reported, but the
router is left alone until they can.

Usage: ``sglang_guard.py --config /etc/sglang-guard/guard.json [--once]``. ``--once`` runs one cycle (every
replica once, router actions included; the cycle counts as one interval for the cap), prints the states as
JSON and exits 0; it starts no metrics server.

Secrets come only from the environment (a systemd EnvironmentFile), never from the config:
``SGLANG_GUARD_ROUTER_ADMIN_KEY`` (router admin API), ``SGLANG_GUARD_SERVER_API_KEY`` (Bearer for the
replicas' ``/v1``; may be empty), ``SGLANG_GUARD_WORKER_API_KEY`` (``api_key`` of ``POST /workers``; may be
empty). They are never logged, printed, saved or exported: every line and label goes through
``guard_policy.scrub`` with them.

``judge_probes.py``, ``judge_verdict.py``, ``fleet_topology.py`` and ``guard_policy.py`` sit next to this
file (``__sglang_guard_code`` in the role's vars/main.yml).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import os
import signal
import socket
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fleet_topology
import guard_policy
import judge_probes
import judge_verdict
import requests

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

CONNECT_TIMEOUT = 10.0  # seconds to open a connection (capped by the request timeout)
ROUTER_TIMEOUT = 30.0  # seconds for a router admin call (capped by the request timeout)
ERROR_BODY_CHARS = 200  # characters of a router error body quoted in a journal line
STATE_VERSION = 1
WORKER_GONE = ("draining",)  # router statuses that no longer count as registered
OK_REMOVE = (200, 202, 204)
OK_ADD = (200, 201, 202)

# Stdlib exceptions that judge_probes.describe_exception names precisely; requests and urllib3 wrap them.
_KNOWN_CAUSES = (
    ConnectionRefusedError,
    http.client.RemoteDisconnected,
    ConnectionResetError,
    TimeoutError,
    ssl.SSLError,
    socket.gaierror,
)


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


# --- HTTP


@dataclass
class Exchange:
    """One request after its retries: a status and body, or a transport error (as in the module)."""

    status: int | None = None
    body: bytes = b""
    received: int = 0
    error: str | None = None
    retryable: bool = False
    timed_out: bool = False
    attempts: int = 0
    latency_s: float = 0.0


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps: causes, contexts, urllib3 ``reason``s and exception arguments."""
    queue: list[BaseException] = [exc]
    seen: set[int] = set()
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        inner = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        queue.extend(item for item in inner if isinstance(item, BaseException))


def describe_transport_error(exc: BaseException) -> tuple[str, bool]:
    """(plain-words description, retryable) for a request that got no HTTP status.

    requests and urllib3 wrap the stdlib error (a refused connection, a dropped connection, a timeout);
    the first stdlib cause found goes to ``judge_probes.describe_exception``, so the words and the retry
    decision are the module's.
    """
    for cause in _causes(exc):
        if isinstance(cause, _KNOWN_CAUSES):
            return judge_probes.describe_exception(cause)
    if isinstance(exc, requests.Timeout):
        return judge_probes.describe_exception(TimeoutError())
    description, retryable = judge_probes.describe_exception(exc)
    return guard_policy.clip(description, 300), retryable


def _is_timeout(exc: BaseException) -> bool:
    """Whether a request error is a timeout, however requests and urllib3 wrap it."""
    return isinstance(exc, requests.Timeout) or any(judge_probes.is_timeout(cause) for cause in _causes(exc))


def _read_body(raw: Any, result: Exchange, stop: threading.Event) -> None:
    """Read the body into ``result``, counting the bytes as they arrive, until its end or until ``stop``
    (the module's reading: ``judge_probes.read_answer``)."""
    read1 = getattr(raw, "read1", None) or raw.read

    def count(size: int) -> None:
        result.received += size

    result.body = judge_probes.read_answer(lambda size: read1(size, decode_content=True), stop.is_set, count)


def _exchange(
    method: str,
    url: str,
    headers: Mapping[str, str],
    data: bytes | None,
    timeout: float,
    verify: bool | str,
    result: Exchange,
    stop: threading.Event,
) -> None:
    """One request into ``result``. Runs in a worker thread; :func:`send_once` watches the clock."""
    try:
        with (
            requests.Session() as session,
            session.request(
                method,
                url,
                data=data,
                headers=dict(headers),
                timeout=(min(CONNECT_TIMEOUT, timeout), timeout),
                verify=verify,
                allow_redirects=False,
                stream=True,
            ) as response,
        ):
            result.status = int(response.status_code)
            _read_body(response.raw, result, stop)
        result.retryable = judge_probes.is_retryable_status(result.status)
    except Exception as exc:  # every transport problem becomes a reason, never a traceback
        result.timed_out = _is_timeout(exc)
        result.body = b""
        result.error, result.retryable = describe_transport_error(exc)


def send_once(
    method: str,
    url: str,
    headers: Mapping[str, str],
    payload: Any = None,
    *,
    timeout: float,
    verify: bool | str = True,
) -> Exchange:
    """One request, no redirects, the body read up to ``judge_verdict.MAX_BODY_BYTES`` + 1 bytes, within a
    total deadline of ``timeout`` seconds from sending it to the body's last byte (as the module does).

    The request runs in a daemon thread; this one waits for it at most ``timeout`` seconds, so a replica that
    trickles bytes (which never trips a socket timeout) cannot hold the cycle. At the deadline the worker is
    told to stop and left behind; it ends at its next read.
    """
    result = Exchange()
    stop = threading.Event()
    data = json.dumps(payload).encode("utf-8") if payload is not None else None
    worker = threading.Thread(
        target=_exchange,
        args=(method, url, headers, data, timeout, verify, result, stop),
        name="guard-request",
        daemon=True,
    )
    started = time.monotonic()
    worker.start()
    worker.join(max(timeout, 0))
    if worker.is_alive() or result.timed_out:
        stop.set()
        elapsed = time.monotonic() - started
        problem = judge_probes.deadline_problem(timeout, elapsed, result.status, result.received)
        return Exchange(error=problem)
    if result.error is not None:
        result.status = None
    return result


def send(
    method: str,
    url: str,
    headers: Mapping[str, str],
    payload: Any = None,
    *,
    retries: int = judge_probes.DEFAULT_RETRIES,
    retry_delay: float = judge_probes.DEFAULT_RETRY_DELAY,
    deadline: float | None = None,
    stop: threading.Event | None = None,
    **request: Any,
) -> Exchange:
    """:func:`send_once` (``request``: its ``timeout`` and ``verify``), retrying only a refused connection
    or a 503, at most ``retries`` more times (the module's rule).

    A retry is not started past ``deadline`` (a ``time.monotonic()`` value) or once ``stop`` is set, so a
    cycle stays bounded.
    """
    attempts = 0
    while True:
        attempts += 1
        started = time.monotonic()
        result = send_once(method, url, headers, payload, **request)
        result.latency_s = round(time.monotonic() - started, 3)
        result.attempts = attempts
        if not result.retryable or attempts > max(retries, 0):
            return result
        if deadline is not None and time.monotonic() + retry_delay > deadline:
            return result
        if stop is not None:
            if stop.wait(max(retry_delay, 0)):
                return result
        else:
            time.sleep(max(retry_delay, 0))


def _gave_up(result: Exchange) -> str:
    return f"gave up after {result.attempts} attempts" if result.attempts > 1 else ""


# --- Checking one replica


@dataclass
class ReplicaCheck:
    """The verdict on one replica this cycle: passed, the symptom (one line), and per-probe details."""

    url: str
    passed: bool
    symptom: str
    model: str | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary (no answer texts)."""
        keep = ("name", "passed", "failures", "finish_reason", "attempts", "latency_s")
        return {
            "passed": self.passed,
            "symptom": self.symptom,
            "model": self.model,
            "probes": [{key: probe.get(key) for key in keep} for probe in self.probes],
        }


def check_replica(
    url: str,
    probes: Sequence[judge_probes.Probe],
    *,
    api_key: str = "",
    model: str | None = None,
    logprobs: bool = True,
    timeout: float = judge_probes.DEFAULT_TIMEOUT,
    verify: bool | str = True,
    retries: int = judge_probes.DEFAULT_RETRIES,
    retry_delay: float = judge_probes.DEFAULT_RETRY_DELAY,
    stop: threading.Event | None = None,
) -> ReplicaCheck:
    """Ask one replica every probe and judge the answers exactly as ``sglang_inference_check`` does.

    Same steps as the module's main(): the model from ``GET /v1/models`` unless given, then one
    ``POST /v1/chat/completions`` per probe with ``judge_probes.build_request``, judged by
    ``judge_response`` or ``judge_transport_error``, with "gave up after N attempts" after failed retries.
    Retries are not started after ``timeout`` x (probes + 1) seconds.
    """
    url = normalize_url(url)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    deadline = time.monotonic() + timeout * (len(probes) + 1)
    common: dict[str, Any] = {
        "timeout": timeout,
        "verify": verify,
        "retries": retries,
        "retry_delay": retry_delay,
        "deadline": deadline,
        "stop": stop,
    }

    if not model:
        listing = send("GET", f"{url}/v1/models", headers, **common)
        if listing.error is not None:
            reason = ", ".join(item for item in (listing.error, _gave_up(listing)) if item)
            return ReplicaCheck(url, False, f"cannot list the models at {url}/v1/models: {reason}")
        model, problem = judge_probes.first_model_id(listing.status, listing.body)
        if problem is not None or model is None:
            return ReplicaCheck(url, False, problem or "no model")

    results: list[dict[str, Any]] = []
    for probe in probes:
        body = judge_probes.build_request(probe, model, logprobs)
        answer = send("POST", f"{url}/v1/chat/completions", headers, body, **common)
        if answer.error is not None:
            verdict = judge_verdict.judge_transport_error(answer.error)
        else:
            verdict = judge_verdict.judge_response(
                answer.status, answer.body, probe, logprobs_requested=logprobs
            )
        if not verdict.passed and answer.retryable and _gave_up(answer):
            verdict.failures.append(_gave_up(answer))
        results.append(
            {
                "name": probe.name,
                **verdict.to_dict(),
                **verdict.classification(),
                "latency_s": answer.latency_s,
                "attempts": answer.attempts,
            }
        )
    passed = all(result["passed"] for result in results)
    symptom = guard_policy.symptom_from_probes((r["name"], r["passed"], r["failures"]) for r in results)
    return ReplicaCheck(url, passed, symptom, model, results)


# --- Holds and the router listing


def read_holds(hold_dir: str | os.PathLike[str]) -> tuple[set[str] | None, list[str]]:
    """(held URLs, problems): the first line of every regular file in ``hold_dir``; no directory, no holds.

    The held URLs are None when the directory or a marker in it cannot be read: then nobody knows which
    replicas a rolling update holds, and the guard must not act on the router. An empty marker is ignored.
    """
    held: set[str] = set()
    problems: list[str] = []
    directory = Path(hold_dir)
    try:
        entries = sorted(directory.iterdir())
    except FileNotFoundError:
        return held, problems
    except OSError as exc:
        return None, [f"cannot list the hold directory {directory}: {exc.strerror or exc}"]
    unreadable = False
    for entry in entries:
        try:
            if not entry.is_file():
                continue
            lines = entry.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:  # released while we read
            continue
        except OSError as exc:
            problems.append(f"cannot read the hold marker {entry}: {exc.strerror or exc}")
            unreadable = True
            continue
        first = lines[0].strip() if lines else ""
        if first:
            held.add(normalize_url(first))
        else:
            problems.append(f"the hold marker {entry} is empty; ignored")
    return (None if unreadable else held), problems


def router_healthy_urls(listing: Mapping[str, Any]) -> set[str]:
    """URLs the router lists and reports healthy (``is_healthy`` true or absent)."""
    return {
        normalize_url(str(worker.get("url", "")))
        for worker in listing.get("workers") or []
        if isinstance(worker, Mapping) and worker.get("is_healthy", True) is not False
    }


def registered_urls(listing: Mapping[str, Any]) -> set[str]:
    """URLs the router lists and is not draining (a DELETEd worker shows ``draining`` for a few seconds)."""
    return {
        normalize_url(str(worker.get("url", "")))
        for worker in listing.get("workers") or []
        if isinstance(worker, Mapping) and str(worker.get("status", "ready")) not in WORKER_GONE
    }


def next_tick(previous: float, interval: float, now: float) -> tuple[float, int]:
    """(the next tick after ``now`` on the grid ``previous + k * interval``, ticks skipped by an overrun).

    The schedule never drifts: ticks stay on the grid of the first one, whatever a cycle takes.
    """
    due = previous + interval
    if due > now:
        return due, 0
    missed = math.floor((now - previous) / interval)
    return previous + (missed + 1) * interval, missed


# --- Metrics


class Metrics:
    """The ``glm5_guard_*`` Prometheus metrics. prometheus_client is imported here, not at module load."""

    def __init__(self, registry: Any = None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge

        self.registry = REGISTRY if registry is None else registry

        def gauge(name: str, documentation: str, *labels: str) -> Any:
            return Gauge(name, documentation, labels, registry=self.registry)

        def counter(name: str, documentation: str, *labels: str) -> Any:
            return Counter(name, documentation, labels, registry=self.registry)

        self.verdict = gauge("glm5_guard_verdict", "Last verdict: 1 pass, 0 fail (absent: held)", "replica")
        self.symptom = gauge(
            "glm5_guard_symptom_info",
            "The current failure symptom (failing replicas only)",
            "replica",
            "symptom",
        )
        self.last_check = gauge(
            "glm5_guard_last_check_timestamp_seconds", "Unix time of the last verdict", "replica"
        )
        self.in_router = gauge("glm5_guard_in_router", "1 when the router lists the replica", "replica")
        self.held = gauge("glm5_guard_held", "1 when a drain marker holds the replica", "replica")
        self.removed = gauge("glm5_guard_removed", "1 when the guard took the replica out", "replica")
        self.transitions = counter(
            "glm5_guard_transitions", "Router transitions made by the guard", "replica", "direction"
        )
        self.failures = gauge("glm5_guard_consecutive_failures", "Failed verdicts in a row", "replica")
        self.alerts = counter(
            "glm5_guard_alerts",
            "Removals refused by a rule (never the last healthy replica, the removal cap, a suspect probe)",
            "replica",
        )
        self.kept_in = gauge(
            "glm5_guard_kept_in",
            "1 while a rule keeps a failing replica in the router (last-healthy, removal-cap, suspect-probe)",
            "replica",
            "rule",
        )
        self.removal_cap = gauge("glm5_guard_removal_cap", "Removals allowed per interval (not degenerate)")
        self.healthy = gauge("glm5_guard_healthy_replicas", "Replicas registered and passing")
        self.router_up = gauge("glm5_guard_router_up", "1 when the last router listing was read")
        self.cycle_seconds = gauge("glm5_guard_cycle_seconds", "Duration of the last cycle")
        self.last_cycle = gauge("glm5_guard_last_cycle_timestamp_seconds", "Unix time the last cycle ended")
        self._symptoms: dict[str, str] = {}
        self._kept: dict[str, str] = {}
        self._counted: dict[tuple[str, ...], int] = {}

    def serve(self, host: str, port: int) -> None:
        """Expose the metrics over HTTP (a daemon thread)."""
        from prometheus_client import start_http_server

        start_http_server(port, addr=host, registry=self.registry)

    def _inc_to(self, counter: Any, name: str, labels: tuple[str, ...], total: int) -> None:
        """Raise a counter to ``total`` (the persisted count), so a restart resumes where it stopped."""
        key = (name, *labels)
        done = self._counted.get(key)
        if done is None or total > done:
            counter.labels(*labels).inc(max(total - (done or 0), 0))
            self._counted[key] = max(total, done or 0)

    def update(
        self, states: Mapping[str, guard_policy.ReplicaState], router_up: bool, cap: int | None = None
    ) -> None:
        """Set every per-replica metric from the states, and the fleet-wide gauges."""
        for url, state in states.items():
            if state.verdict in (guard_policy.PASS, guard_policy.FAIL):
                self.verdict.labels(url).set(1 if state.verdict == guard_policy.PASS else 0)
            else:
                _remove(self.verdict, url)
            symptom = (
                guard_policy.label_symptom(state.symptom) if state.verdict == guard_policy.FAIL else None
            )
            old = self._symptoms.get(url)
            if old is not None and old != symptom:
                _remove(self.symptom, url, old)
                del self._symptoms[url]
            if symptom is not None:
                self.symptom.labels(url, symptom).set(1)
                self._symptoms[url] = symptom
            if state.last_check is not None:
                self.last_check.labels(url).set(state.last_check)
            self.in_router.labels(url).set(int(state.in_router))
            self.held.labels(url).set(int(state.held))
            self.removed.labels(url).set(int(state.removed_by_guard))
            self.failures.labels(url).set(state.consecutive_failures)
            self._inc_to(self.transitions, "transitions", (url, "out"), state.transitions_out)
            self._inc_to(self.transitions, "transitions", (url, "in"), state.transitions_in)
            self._inc_to(self.alerts, "alerts", (url,), state.alerts)
            rule = self._kept.get(url)
            if rule is not None and rule != state.kept_by:
                _remove(self.kept_in, url, rule)
                del self._kept[url]
            if state.kept_by:
                self.kept_in.labels(url, state.kept_by).set(1)
                self._kept[url] = state.kept_by
        self.healthy.set(len(guard_policy.healthy_replicas(states)))
        self.router_up.set(int(router_up))
        if cap is not None:
            self.removal_cap.set(cap)

    def cycle_done(self, seconds: float, timestamp: float) -> None:
        """Record the duration of the last check (of a cycle, or of one replica) and when it ended."""
        self.cycle_seconds.set(seconds)
        self.last_cycle.set(timestamp)

    def alive(self, timestamp: float) -> None:
        """A replica's turn (a verdict, or a hold noted) ended at ``timestamp``: the guard is not stuck."""
        self.last_cycle.set(timestamp)


def _remove(metric: Any, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # not exported yet
        metric.remove(*labels)


# --- The guard


@dataclass
class CycleReport:
    """What one cycle saw and did."""

    router_up: bool
    states: dict[str, guard_policy.ReplicaState]
    checks: dict[str, ReplicaCheck]
    actions: list[guard_policy.Action]
    done: list[tuple[guard_policy.Action, bool, str]]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (what ``--once`` prints)."""
        return {
            "router_up": self.router_up,
            "cycle_seconds": round(self.seconds, 3),
            "states": {url: state.to_dict() for url, state in self.states.items()},
            "actions": [
                {"kind": a.kind, "replica": a.url, "reason": a.reason, "ok": ok, "detail": detail}
                for a, ok, detail in self.done
            ],
            "checks": {url: check.summary() for url, check in self.checks.items()},
        }


class Guard:
    """The daemon's state and its I/O around ``guard_policy``. One :meth:`cycle` is one tick."""

    def __init__(
        self,
        config: Config,
        secrets: Secrets,
        *,
        metrics: Metrics | None = None,
        out: Callable[[str], None] | None = None,
        stop: threading.Event | None = None,
        retries: int = judge_probes.DEFAULT_RETRIES,
        retry_delay: float = judge_probes.DEFAULT_RETRY_DELAY,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.secrets = secrets
        self.metrics = metrics
        self.out = out  # where journal lines go; None: stdout
        self.stop = stop or threading.Event()
        self.retries = retries
        self.retry_delay = retry_delay
        self.clock = clock
        self.states: dict[str, guard_policy.ReplicaState] = {
            url: guard_policy.ReplicaState(url=url) for url in config.replicas
        }
        self.monotonic = monotonic
        self.router_up = False
        self.abandoned = 0  # probe threads left running by a stop in the middle of a cycle
        self.listing: dict[str, Any] | None = None  # the router's last GET /workers answer (None: unreadable)
        self.registered: set[str] | None = (
            None  # URLs it lists and is not draining, as far as the guard knows
        )
        self.unhealthy: set[str] = set()  # registered, reported unhealthy after having been reported healthy
        self.seen_healthy: set[str] = set()  # registered and reported healthy since registered
        self.held: set[str] = set()
        self.removals: list[float] = []  # monotonic times of the capped removals (the cap's sliding window)
        self.cap = guard_policy.removal_cap(len(config.replicas), config.max_removal_fraction)
        self._logged: dict[str, float] = {}  # line -> when log_once wrote it

    # -- output and state

    def log(self, line: str) -> None:
        """One journal line on stdout (or to ``out``), secrets and key-looking strings scrubbed."""
        text = guard_policy.clip(guard_policy.scrub(line, self.secrets.values()), 2000)
        if self.out is not None:
            self.out(text)
        else:
            print(text, flush=True)

    def log_once(self, line: str) -> None:
        """:meth:`log`, but the same line at most once per ``interval`` (the router is read every second)."""
        now = self.monotonic()
        self._logged = {text: at for text, at in self._logged.items() if now - at < self.config.interval}
        if line not in self._logged:
            self._logged[line] = now
            self.log(line)

    def load_state(self) -> None:
        """Load the saved states of the configured replicas (streaks and counters survive a restart)."""
        path = Path(self.config.state_file)
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            self.log(f"state: cannot read {path} ({type(exc).__name__}); starting from scratch")
            return
        replicas = saved.get("replicas") if isinstance(saved, Mapping) else None
        if not isinstance(replicas, Mapping):
            self.log(f"state: {path} holds no replica states; starting from scratch")
            return
        for url in self.config.replicas:
            entry = replicas.get(url)
            if isinstance(entry, Mapping):
                self.states[url] = guard_policy.ReplicaState.from_dict(entry, url=url)
        removed = [url for url, state in self.states.items() if state.removed_by_guard]
        self.log(f"state: loaded from {path}; taken out by the guard: {', '.join(removed) or 'none'}")

    def save_state(self) -> None:
        """Write the states to ``state_file`` atomically (temporary file, fsync, rename)."""
        path = Path(self.config.state_file)
        document = {
            "version": STATE_VERSION,
            "saved_at": self.clock(),
            "replicas": {url: state.to_dict() for url, state in self.states.items()},
        }
        text = json.dumps(scrub_data(document, self.secrets.values()), indent=2, sort_keys=True)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text + "\n")
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            self.log(f"state: cannot write {path}: {exc.strerror or exc}")

    # -- router

    def _admin_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.secrets.router_admin_key:
            headers["Authorization"] = f"Bearer {self.secrets.router_admin_key}"
        return headers

    def _router_timeout(self) -> float:
        return min(ROUTER_TIMEOUT, self.config.timeout)

    def read_router(self) -> tuple[dict[str, Any] | None, str | None]:
        """(the ``GET /workers`` answer, None) or (None, why it could not be read)."""
        url = f"{self.config.router_url}/workers"
        answer = send_once(
            "GET", url, self._admin_headers(), timeout=self._router_timeout(), verify=self.config.verify
        )
        if answer.error is not None:
            return None, answer.error
        if answer.status != 200:
            return None, f"GET /workers answered HTTP {answer.status}{_excerpt(answer.body)}"
        try:
            listing = json.loads(answer.body)
        except ValueError:
            return None, "GET /workers answered something that is not JSON"
        if not isinstance(listing, dict) or not isinstance(listing.get("workers"), list):
            return None, "GET /workers answered JSON without a 'workers' list"
        return listing, None

    def execute(self, action: guard_policy.Action, listing: Mapping[str, Any]) -> tuple[bool, str]:
        """Make the router call for a ``remove`` or ``add``: (done, detail)."""
        base = self.config.router_url
        timeout, verify = self._router_timeout(), self.config.verify
        if action.kind == guard_policy.REMOVE:
            worker = fleet_topology.find_worker(listing, action.url)
            if worker is None:  # registered since the last poll (the guard put it back): read again
                fresh = self.read_router()[0]
                worker = fleet_topology.find_worker(fresh or {}, action.url)
            if worker is None or "id" not in worker:
                return False, "the router no longer lists it (someone else took it out)"
            worker_id = urllib.parse.quote(str(worker["id"]), safe="")
            answer = send_once(
                "DELETE", f"{base}/workers/{worker_id}", self._admin_headers(), timeout=timeout, verify=verify
            )
            if answer.error is not None:
                return False, answer.error
            if answer.status in OK_REMOVE:
                return True, f"HTTP {answer.status}"
            return False, f"DELETE /workers/{{id}} answered HTTP {answer.status}{_excerpt(answer.body)}"
        if action.kind == guard_policy.ADD:
            payload: dict[str, str] = {"url": action.url}
            if self.secrets.worker_api_key:
                payload["api_key"] = self.secrets.worker_api_key
            answer = send_once(
                "POST", f"{base}/workers", self._admin_headers(), payload, timeout=timeout, verify=verify
            )
            if answer.error is not None:
                return False, answer.error
            if answer.status in OK_ADD:
                return True, f"HTTP {answer.status}"
            if answer.status == 409:
                return True, "HTTP 409: already registered"
            return False, f"POST /workers answered HTTP {answer.status}{_excerpt(answer.body)}"
        return True, ""

    # -- probes

    def check(self, url: str) -> ReplicaCheck:
        """Probe one replica with the configured probes."""
        config = self.config
        try:
            return check_replica(
                url,
                config.probes,
                api_key=self.secrets.server_api_key,
                model=config.model,
                logprobs=config.logprobs,
                timeout=config.timeout,
                verify=config.replica_verify,
                retries=self.retries,
                retry_delay=self.retry_delay,
                stop=self.stop,
            )
        except Exception as exc:  # a bug must not cost the verdicts of the others
            return ReplicaCheck(url, False, f"the guard could not check it ({type(exc).__name__}: {exc})")

    def probe_all(self, urls: Sequence[str]) -> dict[str, ReplicaCheck] | None:
        """Probe the replicas concurrently (at most ``workers`` at once); None when a stop was requested
        before they all answered."""
        if not urls:
            return {}
        workers = min(self.config.workers, len(urls))
        executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="guard-probe")
        futures = {executor.submit(self.check, url): url for url in urls}
        pending = set(futures)
        while pending:
            pending = wait_futures(pending, timeout=0.5)[1]
            if pending and self.stop.is_set():
                self.abandoned = len(pending)
                executor.shutdown(wait=False, cancel_futures=True)
                return None
        executor.shutdown(wait=True)
        return {url: future.result() for future, url in futures.items()}

    # -- the router's word and the holds

    def poll(self) -> None:
        """Read the router's worker list and the holds into ``listing``, ``registered``, ``unhealthy`` and
        ``held`` (``registered`` None when either cannot be read: no router actions then)."""
        config = self.config
        listing, router_error = self.read_router()
        if router_error is not None:
            self.log_once(
                f"router unreachable at {config.router_url}: {router_error}; no router actions this cycle"
            )
        self.listing = listing
        self.router_up = listing is not None
        registered = registered_urls(listing) if listing is not None else None
        if listing is not None and registered is not None:
            healthy_now = router_healthy_urls(listing) & registered
            self.seen_healthy = (self.seen_healthy & registered) | healthy_now
            self.unhealthy = (registered - healthy_now) & self.seen_healthy
        holds, problems = read_holds(config.hold_dir)
        for problem in problems:
            self.log_once(f"holds: {problem}")
        if holds is None:
            self.log_once("holds: unknown, so no router actions this cycle")
            registered = None
        self.held = {url for url in config.replicas if url in (holds or ())}
        self.registered = registered

    # -- decisions

    def decide(
        self,
        checks: Mapping[str, ReplicaCheck],
        fresh: set[str] | None,
        budget: int | None = None,
    ) -> tuple[list[guard_policy.Action], list[tuple[guard_policy.Action, bool, str]]]:
        """Apply the policy to the verdicts of ``checks`` (the replicas in ``fresh`` may be acted on; None:
        all), make the router calls, log, export, save. Returns (actions, done)."""
        config = self.config
        secrets = self.secrets.values()
        verdicts: dict[str, tuple[bool, str, guard_policy.Judgement]] = {}
        for url, check in checks.items():
            check.symptom = guard_policy.scrub(check.symptom, secrets)
            judgement = guard_policy.Judgement.from_probes(check.passed, check.probes)
            verdicts[url] = (check.passed, check.symptom, judgement)
        if budget is None:
            budget = guard_policy.removal_budget(self.removals, self.monotonic(), config.interval, self.cap)
        decision = guard_policy.decide_cycle(
            self.states,
            verdicts,
            self.registered,
            self.held,
            config.fail_after,
            config.recover_after,
            now=self.clock(),
            replicas=config.replicas,
            budget=budget,
            cap=self.cap,
            unhealthy=self.unhealthy,
            fresh=fresh,
        )
        for line in decision.lines:
            self.log(line)
        states = decision.states
        done: list[tuple[guard_policy.Action, bool, str]] = []
        for action in decision.actions:
            if action.kind == guard_policy.ALERT:
                done.append((action, True, ""))
                continue
            ok, detail = self.execute(action, self.listing or {})
            done.append((action, ok, guard_policy.scrub(detail, secrets)))
            states[action.url], lines = guard_policy.apply_outcome(states[action.url], action, ok, detail)
            for line in lines:
                self.log(line)
            if ok and self.registered is not None:  # what the router lists now, until the next poll
                if action.kind == guard_policy.REMOVE:
                    self.registered.discard(action.url)
                    self.unhealthy.discard(action.url)
                    if action.capped:
                        self.removals.append(self.monotonic())
                else:
                    self.registered.add(action.url)
        self.removals = [t for t in self.removals if self.monotonic() - t < config.interval]
        self.states = states
        if self.metrics is not None:
            self.metrics.update(states, self.router_up, self.cap)
        if checks or decision.lines or decision.actions:
            self.save_state()
        return decision.actions, done

    # -- one cycle (--once, and tests): every replica once, then one decision

    def cycle(self) -> CycleReport | None:
        """Read the router and the holds, probe every replica not held, decide, act, log, export, save. A
        cycle is one interval: the removal cap applies to it whole. None if stopped midway."""
        started = time.monotonic()
        self.poll()
        checks = self.probe_all([url for url in self.config.replicas if url not in self.held])
        if checks is None:
            self.log(
                f"stop requested during the probes; {self.abandoned} replica checks abandoned, no actions"
            )
            return None
        actions, done = self.decide(checks, None, budget=self.cap)
        seconds = time.monotonic() - started
        if self.metrics is not None:
            self.metrics.cycle_done(seconds, self.clock())
        return CycleReport(self.router_up, self.states, checks, actions, done, seconds)

    # -- the daemon: each replica on its own schedule

    def run_forever(self) -> None:
        """Until ``stop``: each replica is checked every ``interval`` seconds on its own grid, at most
        ``workers`` at once, and judged the moment its verdict arrives; a replica whose check is still
        running is not dispatched again, so a slow or hanging replica delays no other. The router's worker
        list and the holds are read every ``router_poll`` seconds (the router-health fast path). A failing
        step is logged, not fatal."""
        config = self.config
        wake = threading.Event()
        pool = ThreadPoolExecutor(
            max_workers=min(config.workers, len(config.replicas)), thread_name_prefix="guard-probe"
        )
        start = self.monotonic()
        # The first checks spread evenly over the first interval, so the fleet is asked at an even pace, not
        # in bursts of every replica at once.
        spread = config.interval / len(config.replicas)
        due = {url: start + number * spread for number, url in enumerate(config.replicas)}
        running: dict[Future[ReplicaCheck], tuple[str, float]] = {}
        next_poll = start
        try:
            while not self.stop.is_set():
                now = self.monotonic()
                try:
                    if now >= next_poll:
                        self.poll()
                        self.decide({}, set())
                        next_poll = next_tick(next_poll, config.router_poll, self.monotonic())[0]
                    now = self.monotonic()
                    busy = {url for url, _started in running.values()}
                    held_due: set[str] = set()
                    for url in config.replicas:
                        if url in busy or due[url] > now:
                            continue
                        # Its next check an interval after this one starts; one that outlasts the interval is
                        # followed by the next as soon as it ends, never by a second one beside it.
                        due[url] = now + config.interval
                        if url in self.held:
                            held_due.add(url)
                            continue
                        future = pool.submit(self.check, url)
                        running[future] = (url, now)
                        future.add_done_callback(lambda _: wake.set())
                    finished = [future for future in running if future.done()]
                    checks = {}
                    for future in finished:
                        url, dispatched = running.pop(future)
                        checks[url] = future.result()
                        took = self.monotonic() - dispatched
                        if took > config.interval:
                            self.log(
                                f"note replica={url} its check took {took:.1f} s, longer than the interval "
                                f"({config.interval:g} s); the next one starts now"
                            )
                        if self.metrics is not None:
                            self.metrics.cycle_done(took, self.clock())
                    if checks or held_due:
                        self.decide(checks, set(checks) | held_due)
                        if self.metrics is not None:  # some replica's turn ended: the guard is not stuck
                            self.metrics.alive(self.clock())
                except Exception as exc:  # keep guarding: the next step may work
                    self.log(f"step failed: {type(exc).__name__}: {exc}")
                idle = [due[url] for url in config.replicas if url not in {u for u, _t in running.values()}]
                wait = min([next_poll, *idle]) - self.monotonic()
                if wake.wait(max(min(wait, config.router_poll), 0.01)):
                    wake.clear()
        finally:
            self.abandoned = sum(1 for future in running if not future.done())
            pool.shutdown(wait=False, cancel_futures=True)


def scrub_data(data: Any, secrets: Sequence[str]) -> Any:
    """A copy of JSON-like ``data`` whose strings are scrubbed (scrubbing the JSON text could break it)."""
    if isinstance(data, str):
        return guard_policy.scrub(data, secrets)
    if isinstance(data, Mapping):
        return {scrub_data(str(key), secrets): scrub_data(value, secrets) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [scrub_data(item, secrets) for item in data]
    return data


def _excerpt(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    return f": {guard_policy.clip(text, ERROR_BODY_CHARS)}" if text else ""


# --- Entry point


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line: ``--config PATH`` and ``--once``."""
    parser = argparse.ArgumentParser(description="Judge what each sglang replica answers; act on the router.")
    parser.add_argument("--config", default=DEFAULT_CONFIG, help=f"guard.json (default {DEFAULT_CONFIG})")
    parser.add_argument("--once", action="store_true", help="run one cycle, print the states as JSON, exit")
    return parser.parse_args(argv)


def _install_signal_handlers(stop: threading.Event) -> None:
    def handler(signum: int, _frame: object) -> None:
        # Set the event from another thread: Event.set in a handler can deadlock on the event's own lock.
        threading.Thread(target=stop.set, daemon=True).start()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Run the guard. Returns the exit code: 0, or 2 for a bad config."""
    args = parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"sglang-guard: config error: {exc}", file=sys.stderr, flush=True)
        return 2
    secrets = Secrets.from_env(environ)
    stop = threading.Event()
    guard = Guard(config, secrets, stop=stop)
    guard.load_state()

    if args.once:
        report = guard.cycle()
        document = report.to_dict() if report is not None else {"stopped": True}
        print(json.dumps(scrub_data(document, secrets.values()), indent=2), flush=True)
        return 0

    _install_signal_handlers(stop)
    guard.metrics = Metrics()
    guard.metrics.serve(config.metrics_host, config.metrics_port)
    guard.log(
        f"start: {len(config.replicas)} replicas, interval {config.interval:g} s, "
        f"fail_after {config.fail_after}, recover_after {config.recover_after}, "
        f"removal cap {guard.cap} per interval, router poll {config.router_poll:g} s, "
        f"{config.workers} checks at once, "
        f"router {config.router_url}, metrics on {config.metrics_host}:{config.metrics_port}, "
        f"{secrets.summary()}"
    )
    guard.run_forever()
    guard.log("stop: SIGTERM or SIGINT received")
    if guard.abandoned:
        # Probe threads still wait on a replica: do not let interpreter shutdown join them (up to 'timeout').
        sys.stdout.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
