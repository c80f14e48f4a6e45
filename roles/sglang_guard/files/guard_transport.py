"""sglang-guard's transport: one HTTP exchange with a deadline, its failures in words, and one replica's check
(the inference check's probes, judged by judge_verdict), and the router's listing and the holds read.

Part of the guard daemon (sglang_guard.py, which runs the loop); installed beside it."""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import guard_policy
import judge_probes
import judge_verdict
import requests
from guard_config import normalize_url

CONNECT_TIMEOUT = 10.0  # seconds to open a connection (capped by the request timeout)
ROUTER_TIMEOUT = 30.0  # seconds for a router admin call (capped by the request timeout)
WORKER_GONE = ("draining",)  # router statuses that no longer count as registered

# Stdlib exceptions that judge_probes.describe_exception names precisely; requests and urllib3 wrap them.
_KNOWN_CAUSES = (
    ConnectionRefusedError,
    http.client.RemoteDisconnected,
    ConnectionResetError,
    TimeoutError,
    ssl.SSLError,
    socket.gaierror,
)


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
