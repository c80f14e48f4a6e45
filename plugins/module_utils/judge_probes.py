"""The probes of the inference check, and the HTTP side of asking them.

A probe is one question for an SGLang server and what its answer must look like; the module
``sglang_inference_check``, the guard daemon (roles/sglang_guard) and the fleet inputs' checks share these
definitions. Here: the probe options and their defaults (:data:`DEFAULT_PROBES`, the seeds' two), their
validation (:func:`normalize_probes`, which raises :class:`ProbeError` in plain words), the request body a
probe makes (:func:`build_request`), and the pure decisions of the HTTP side that the module and the guard
share: reading an answer within a deadline (:func:`read_answer`, :func:`deadline_problem`), naming an error
that got no HTTP status and whether to retry it (:func:`describe_exception`, :func:`is_timeout`,
:func:`is_retryable_status`), and the model id of ``GET /v1/models`` (:func:`first_model_id`).

No I/O: the callers do the requests. Judging the answer is ``judge_verdict``'s (this file imports from it,
never the other way). The guard ships this file flat, next to ``judge_verdict.py``, hence the second import.
"""

from __future__ import annotations

import http.client
import math
import re
import socket
import ssl
import urllib.error
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    from ansible_collections.glm5.deploy.plugins.module_utils import judge_verdict
except ImportError:  # the guard daemon's flat copy (roles/sglang_guard)
    import judge_verdict

# --- Defaults for the module's options

# GLM-5 thinks before it answers; its reasoning for the default probes runs to a few hundred or a couple of
# thousand tokens. A cap that cuts the thinking short yields content "" and finish_reason "length": a FAIL.
DEFAULT_MAX_TOKENS = 4096
# Seconds each request may take in all, from sending it to the last byte of the answer: a total deadline, not
# an idle timeout. sglang sends a non-streamed answer in one piece once it is generated, so this is also the
# time the model has to think and answer; GLM-5 on the default probes needs a fraction of it, and the seeds'
# 300 s stays the budget. A server that trickles bytes is stopped here instead of holding the play.
DEFAULT_TIMEOUT = 300
DEFAULT_RETRIES = 3
DEFAULT_RETRY_DELAY = 5
DEFAULT_FINISH_REASON = "stop"
DEFAULT_TEMPERATURE = 0.0

# Chat-completion finish reasons in sglang 0.5.23 (entrypoints/openai/protocol.py).
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "function_call", "abort")

# The seeds' two probes. The 2+2 expectation: the content's only number is 4, optionally after "2+2"
# ("4", "4.", "**4**", "2 + 2 = 4", "The answer is 4." pass; "5", "44", "2+2=5" fail).
EXPECT_FOUR = r"^[^0-9]*(?:2[^0-9]+2[^0-9]+)?4[^0-9]*$"
DEFAULT_PROBES: tuple[dict[str, Any], ...] = (
    {"name": "2+2", "prompt": "What is 2+2? Answer briefly.", "expect": EXPECT_FOUR},
    {
        "name": "prime",
        "prompt": (
            "Write a Python function that checks if a number is prime. Include docstring and type hints."
        ),
        "expect_python": True,
    },
)

PROBE_KEYS = (
    "name",
    "prompt",
    "messages",
    "max_tokens",
    "expect",
    "expect_python",
    "finish_reason",
    "temperature",
    "extra_body",
)
# Request keys a probe sets through its own options; extra_body may not override them.
RESERVED_BODY_KEYS = {
    "model": "the module's 'model' option",
    "messages": "the probe's 'prompt' or 'messages'",
    "max_tokens": "the probe's 'max_tokens'",
    "temperature": "the probe's 'temperature'",
    "logprobs": "the module's 'logprobs' option",
    "stream": "nothing: the check needs one JSON answer, not a stream",
    "n": "nothing: only one choice is judged",
}


class ProbeError(ValueError):
    """A probe definition is invalid; the message says which probe, which key and what to do."""


@dataclass(frozen=True)
class Probe:
    """One normalized question for the server, and what its answer must look like."""

    name: str
    messages: tuple[dict[str, Any], ...]
    max_tokens: int = DEFAULT_MAX_TOKENS
    expect: str | None = None
    expect_python: bool = False
    finish_reason: str = DEFAULT_FINISH_REASON
    temperature: float = DEFAULT_TEMPERATURE
    extra_body: dict[str, Any] = field(default_factory=dict)


# --- Probes


def normalize_probe(raw: object, index: int = 0) -> Probe:
    """Validate one probe definition and fill in its defaults. Keys whose value is None count as absent.

    Raises ProbeError with a message naming the probe and the problem.
    """
    where = f"probe #{index + 1}"
    if not isinstance(raw, Mapping):
        raise ProbeError(
            f"{where} must be a dict with 'name' and 'prompt' or 'messages', got {type(raw).__name__}"
        )
    data = {key: value for key, value in raw.items() if value is not None}
    unknown = sorted(str(key) for key in data if key not in PROBE_KEYS)
    if unknown:
        raise ProbeError(f"{where} has unknown keys {unknown}; allowed: {', '.join(PROBE_KEYS)}")

    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ProbeError(f"{where} needs a 'name' (a non-empty string)")
    where = f"probe '{name}'"

    has_prompt = "prompt" in data
    has_messages = "messages" in data
    if has_prompt == has_messages:
        raise ProbeError(f"{where} needs exactly one of 'prompt' or 'messages'")
    if has_prompt:
        prompt = data["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise ProbeError(f"{where}: 'prompt' must be a non-empty string")
        messages: tuple[dict[str, Any], ...] = ({"role": "user", "content": prompt},)
    else:
        raw_messages = data["messages"]
        if (
            not isinstance(raw_messages, Sequence)
            or isinstance(raw_messages, (str, bytes))
            or not raw_messages
        ):
            raise ProbeError(f"{where}: 'messages' must be a non-empty list of {{role, content}} dicts")
        checked = []
        for number, message in enumerate(raw_messages, start=1):
            if not isinstance(message, Mapping):
                raise ProbeError(f"{where}: message {number} must be a dict with 'role' and 'content'")
            role = message.get("role")
            if not isinstance(role, str) or not role:
                raise ProbeError(f"{where}: message {number} needs a 'role' (e.g. user, system)")
            if not isinstance(message.get("content"), (str, list)):
                raise ProbeError(f"{where}: message {number} needs a 'content' (a string)")
            checked.append(dict(message))
        messages = tuple(checked)

    max_tokens = data.get("max_tokens", DEFAULT_MAX_TOKENS)
    if not judge_verdict.is_int(max_tokens) or max_tokens < 1:
        raise ProbeError(f"{where}: 'max_tokens' must be a positive integer, got {max_tokens!r}")

    expect = data.get("expect")
    if expect is not None:
        if not isinstance(expect, str):
            raise ProbeError(f"{where}: 'expect' must be a regular expression string")
        try:
            re.compile(expect)
        except re.error as exc:
            raise ProbeError(f"{where}: 'expect' is not a valid regular expression: {exc}") from None

    expect_python = data.get("expect_python", False)
    if not isinstance(expect_python, bool):
        raise ProbeError(f"{where}: 'expect_python' must be true or false")

    finish_reason = data.get("finish_reason", DEFAULT_FINISH_REASON)
    if finish_reason not in FINISH_REASONS:
        raise ProbeError(f"{where}: 'finish_reason' must be one of {', '.join(FINISH_REASONS)}")

    temperature = data.get("temperature", DEFAULT_TEMPERATURE)
    if not judge_verdict.is_number(temperature) or not math.isfinite(temperature) or temperature < 0:
        raise ProbeError(f"{where}: 'temperature' must be a number >= 0, got {temperature!r}")

    extra_body = data.get("extra_body", {})
    if not isinstance(extra_body, Mapping):
        raise ProbeError(f"{where}: 'extra_body' must be a dict, e.g. {{chat_template_kwargs: {{...}}}}")
    for key in extra_body:
        if key in RESERVED_BODY_KEYS:
            raise ProbeError(f"{where}: 'extra_body' may not set '{key}'; use {RESERVED_BODY_KEYS[key]}")

    return Probe(
        name=name,
        messages=messages,
        max_tokens=max_tokens,
        expect=expect,
        expect_python=expect_python,
        finish_reason=finish_reason,
        temperature=float(temperature),
        extra_body=dict(extra_body),
    )


def normalize_probes(raw: object) -> list[Probe]:
    """Validate a probe list; None means the default probes. Names must be unique."""
    if raw is None:
        raw = DEFAULT_PROBES
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        raise ProbeError("'probes' must be a list of dicts")
    if not raw:
        raise ProbeError("'probes' is empty; leave it out to use the default probes")
    probes = [normalize_probe(item, index) for index, item in enumerate(raw)]
    seen: set[str] = set()
    for probe in probes:
        if probe.name in seen:
            raise ProbeError(f"probe name '{probe.name}' is used twice; names must be unique")
        seen.add(probe.name)
    return probes


def build_request(probe: Probe, model: str, logprobs: bool) -> dict[str, Any]:
    """The JSON body for POST /v1/chat/completions."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [dict(message) for message in probe.messages],
        "max_tokens": probe.max_tokens,
        "temperature": probe.temperature,
        "stream": False,
    }
    if logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = 1
    body.update(probe.extra_body)
    return body


# --- Transport decisions (pure: they only look at exception objects)

READ_CHUNK = 64 * 1024  # bytes per read of an answer; a read returns what has arrived, up to this
# An answer is read up to judge_verdict.MAX_BODY_BYTES + 1 bytes: a longer body fails there as too large.


def read_answer(
    read: Callable[[int], bytes], stopped: Callable[[], bool], count: Callable[[int], None]
) -> bytes:
    """An answer's body, read in chunks of ``READ_CHUNK`` up to ``MAX_BODY_BYTES`` + 1 bytes, until its end or
    until ``stopped()`` (the caller's deadline). ``count`` is told each chunk's size as it arrives, so that a
    caller that gives up at the deadline can say how much came. Shared by the module and the guard."""
    chunks = []
    received = 0
    while received <= judge_verdict.MAX_BODY_BYTES and not stopped():
        chunk = read(READ_CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
        received += len(chunk)
        count(len(chunk))
    return b"".join(chunks)


def describe_exception(exc: BaseException) -> tuple[str, bool]:
    """(plain-words description, retryable) for an error raised by a request that got no HTTP status.

    Only a refused connection is retryable: the server is not listening yet. A connection closed without a
    response is not: that is how a crashing sglang looks (the scheduler dies, the server kills itself).
    """
    reason: object = exc
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        reason = exc.reason
    if isinstance(reason, ConnectionRefusedError) or (
        isinstance(reason, str) and "connection refused" in reason.lower()
    ):
        return "connection refused", True
    if isinstance(reason, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer (did it crash? check its journal)", False
    if isinstance(reason, ConnectionResetError):
        return "the connection was reset (did the server crash? check its journal)", False
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "no answer before the timeout", False
    if isinstance(reason, ssl.SSLError):
        return f"TLS error: {reason}", False
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve the host: {reason}", False
    return f"{type(reason).__name__}: {reason}", False


def is_timeout(exc: BaseException) -> bool:
    """Whether a request error is a socket timeout (urllib wraps it in a URLError)."""
    reason: object = exc
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        reason = exc.reason
    return isinstance(reason, (TimeoutError, socket.timeout))


def deadline_problem(deadline_s: float, elapsed_s: float, status: int | None, received: int) -> str:
    """The plain words for a request stopped at its total deadline: how far the answer got, after how long.

    ``status`` is None when the status line and headers had not all arrived; ``received`` counts the bytes of
    the body. A server that trickles its answer a byte at a time never trips a socket timeout; this stops it.
    """
    count = f"{received} byte{'' if received == 1 else 's'}"
    if status is None:
        got = f"{count} received after {elapsed_s:.1f} s, not even the status line and headers"
    else:
        got = f"HTTP {status}, then {count} of the body received after {elapsed_s:.1f} s"
    return f"no complete answer within the {deadline_s:g} s deadline: {got} (a stalled or trickling server)"


def is_retryable_status(status: int) -> bool:
    """503 means starting or draining: worth another try. Any other status is an answer to judge."""
    return status == 503


def first_model_id(status: object, body: bytes | str | None) -> tuple[str | None, str | None]:
    """(model id, None) from a GET /v1/models answer, or (None, what went wrong)."""
    text, error = judge_verdict.decode_body(body)
    if judge_verdict.is_int(status) and status in judge_verdict.AUTH_STATUSES:
        return None, f"GET /v1/models: {judge_verdict.auth_problem(status)}"
    if status != 200:
        return None, f"GET /v1/models answered HTTP {status}; set the 'model' option"
    if text is None:
        return None, f"GET /v1/models: {error}"
    obj, error = judge_verdict.parse_json(text)
    data = obj.get("data") if isinstance(obj, Mapping) else None
    if error or not isinstance(data, list) or not data:
        return None, "GET /v1/models did not list any model; set the 'model' option"
    first = data[0]
    model = first.get("id") if isinstance(first, Mapping) else None
    if not isinstance(model, str) or not model:
        return None, "GET /v1/models: the first model has no id; set the 'model' option"
    return model, None
