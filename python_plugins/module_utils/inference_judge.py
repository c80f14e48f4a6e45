"""Judge what an SGLang server actually answers, not whether /health is green.

Pure functions, no I/O: the module ``sglang_inference_check`` does the HTTP and journal reads and hands the
raw status and body to :func:`judge_response`. Nothing here raises on server input: whatever the server sends,
the judge returns a :class:`Verdict`, and a failed verdict always carries at least one reason in plain words.

Why: a NaN-poisoned model keeps ``/health`` at 200 while it answers ``!!!!`` (token 0 repeated: argmax of NaN
is 0), with ``finish_reason: length`` and, when logprobs are requested, every logprob ``null`` (sglang#36716;
reproduced with real sglang 0.5.23, see tests/fixtures/sglang-responses/).

Degenerate-output rule (:func:`find_degenerate`), applied to content and to reasoning_content separately:

1. A run of ``RUN_MIN`` (8) or more identical non-whitespace characters fails (``!!!!!!!!``, ``Z!!!!…``).
   Characters that legitimate text repeats as rules and numbers (``RULE_CHARS``: ``- = _ * # ~ . ` + | / \\
   < >`` and digits, e.g. a numpy docstring's ``----------`` or ``1000000000``) fail only when the run is
   dominant, i.e. covers at least half (``DOMINANT_SHARE``) of the stripped text.
2. A unit of 2 to ``MAX_UNIT`` (16) characters repeated back to back at least ``REPEAT_MIN`` (8) times fails
   when the repetition is dominant, or, anywhere in the text, when it repeats ``REPEAT_ANYWHERE`` (32) times
   or more and the unit holds a character outside ``RULE_CHARS`` and whitespace.

Whitespace never counts: indentation and blank lines are not repetition. Short answers such as ``4`` pass.

Logprobs rule (:func:`check_logprobs`): every logprob, the token's and its top_logprobs', must be a finite
number no higher than 0 (``LOGPROB_CEILING`` allows float32 rounding: sglang takes the log of a softmax). When
logprobs were requested, ``logprobs.content`` holds exactly one entry per generated token,
``usage.completion_tokens`` (real sglang 0.5.23 counts the stop token in both: 10 and 10 in
healthy_chat_2plus2_logprobs, 16 and 16 in nan_lnf__chat_greedy_logprobs). Without that rule an empty or short
list would pass for a clean one.

HTTP 401 and 403 are a key problem (:data:`AUTH_PROBLEM`), reported without the server's words, which could
echo the key.
"""

from __future__ import annotations

import ast
import http.client
import json
import math
import re
import socket
import ssl
import urllib.error
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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

# --- Thresholds

MAX_BODY_BYTES = 16 * 1024 * 1024  # a chat answer with logprobs for 4096 tokens is about 1 MB
READ_CHUNK = 64 * 1024  # bytes per read of an answer; a read returns what has arrived, up to this
CONTENT_KEEP = 2000  # characters of content returned per probe
REASONING_KEEP = 400  # characters of reasoning_content returned per probe (head and tail)
SAMPLE_CHARS = 16  # characters of a degenerate run quoted in a failure
RUN_MIN = 8
REPEAT_MIN = 8
REPEAT_ANYWHERE = 32
MAX_UNIT = 16
DOMINANT_SHARE = 0.5
SCAN_CHARS = 200_000  # longest text scanned for repetition (head and tail beyond that)
RULE_CHARS = frozenset("-=_*#~.`+|/\\<>0123456789")
# Highest logprob accepted. A log-probability is never above 0, but sglang takes the log of a float32 softmax,
# and a near-certain token's probability can round to 1 plus an ulp: its log is about +1.2e-7. Anything above
# this is an impossible number, not rounding.
LOGPROB_CEILING = 1e-4

# --- Keys

# Statuses that mean the server did not accept the request's credentials (sglang: 401 "Missing API key" or
# "Invalid API key"; a proxy in front may say 403). Never retried, never quoted (the body could echo the key).
AUTH_STATUSES = (401, 403)
AUTH_PROBLEM = (
    "the server refused the API key (HTTP {status}): check sglang_server_api_key / the key the check sends"
)

# --- Journal signatures

# (regex, what it means). Matched per line, case-insensitively; a line is reported once, for its first match.
JOURNAL_SIGNATURES: tuple[tuple[str, str], ...] = (
    (r"probability tensor contains either", "NaN/Inf in the sampling probabilities"),
    (r"nan detected", "NaN logits detected"),
    (r"device-side assert", "CUDA device-side assert"),
    (r"CUDA error", "CUDA error"),
    (r"\bhit an exception\b", "an sglang process crashed"),
    (r"Traceback \(most recent call last\)", "Python traceback"),
    (r"SIGQUIT received", "an sglang child process failed"),
)
_JOURNAL_RES = tuple((re.compile(pattern, re.IGNORECASE), meaning) for pattern, meaning in JOURNAL_SIGNATURES)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
JOURNAL_MAX_FINDINGS = 20
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\\][A-Za-z0-9:_.@\\-]*$")


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


@dataclass
class Verdict:
    """What the judge concluded about one answer. ``passed`` is True exactly when ``failures`` is empty."""

    passed: bool
    failures: list[str]
    finish_reason: str | None = None
    matched_stop: int | str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    completion_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failures": list(self.failures),
            "finish_reason": self.finish_reason,
            "matched_stop": self.matched_stop,
            "content": self.content,
            "reasoning_content": self.reasoning_content,
            "completion_tokens": self.completion_tokens,
        }


# --- Small helpers


def _clean(text: str) -> str:
    """Replace lone surrogates (JSON may carry them) so the text always encodes as UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _quote(text: str, limit: int = 80) -> str:
    """Quote text for a message: repr of the first ``limit`` characters, with … when cut."""
    cut = text[:limit]
    return repr(_clean(cut)) + ("…" if len(text) > limit else "")


def truncate(text: str | None, keep: int) -> str | None:
    """Keep at most ``keep`` characters: the head, or for long texts the head and tail around a marker."""
    if text is None or len(text) <= keep:
        return None if text is None else _clean(text)
    half = keep // 2
    return _clean(f"{text[:half]} …[{len(text) - 2 * half} chars cut]… {text[-half:]}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
    if not _is_int(max_tokens) or max_tokens < 1:
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
    if not _is_number(temperature) or not math.isfinite(temperature) or temperature < 0:
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


# --- Degenerate output

_CHAR_RUN = re.compile(rf"(\S)\1{{{RUN_MIN - 1},}}")
_UNIT_RUNS = tuple(
    (size, re.compile(rf"(.{{{size}}})\1{{{REPEAT_MIN - 1},}}", re.DOTALL)) for size in range(2, MAX_UNIT + 1)
)


def _sample(span: str) -> str:
    return repr(_clean(span[:SAMPLE_CHARS])) + ("…" if len(span) > SAMPLE_CHARS else "")


def find_degenerate(text: str) -> str | None:
    """Describe degenerate repetition in text (the rule is in the module docstring), or None."""
    if len(text) > SCAN_CHARS:  # far beyond any real answer: judge its head and tail
        text = text[: SCAN_CHARS // 2] + "\n" + text[-(SCAN_CHARS // 2) :]
    total = len(text.strip())
    if total < RUN_MIN:
        return None
    for match in _CHAR_RUN.finditer(text):
        span = match.group(0)
        char = span[0]
        if char not in RULE_CHARS or len(span) >= DOMINANT_SHARE * total:
            return f"{_sample(span)} ({char!r} repeated {len(span)} times)"
    for size, pattern in _UNIT_RUNS:
        for match in pattern.finditer(text):
            unit = match.group(1)
            if not unit.strip():
                continue
            span = match.group(0)
            count = len(span) // size
            dominant = len(span) >= DOMINANT_SHARE * total
            plain = all(char in RULE_CHARS or char.isspace() for char in unit)
            if dominant or (count >= REPEAT_ANYWHERE and not plain):
                return f"{_sample(span)} ({unit!r} repeated {count} times)"
    return None


def is_degenerate(text: str) -> str | None:
    """Alias of :func:`find_degenerate`: a description when the text is degenerate, else None."""
    return find_degenerate(text)


# --- Logprobs


def _logprob_values(entry: Mapping[str, Any], number: int) -> tuple[list[tuple[object, str]], bool]:
    """The logprobs of one ``logprobs.content`` entry, each with where it sits, and whether the entry is
    malformed (its top_logprobs is neither a list nor null)."""
    token = entry.get("token")
    where = f"token {number}" + (f" ({_quote(token, 20)})" if isinstance(token, str) else "")
    values: list[tuple[object, str]] = [(entry.get("logprob"), where)]
    top = entry.get("top_logprobs")
    if isinstance(top, list):
        for item in top:
            value = item.get("logprob") if isinstance(item, Mapping) else item
            values.append((value, f"a top_logprob of {where}"))
        return values, False
    return values, top is not None


def _logprob_kind(value: object) -> str | None:
    """Which rule a logprob breaks (null, not a number, non-finite, above 0), or None for a sound one."""
    if value is None:
        return "null"
    if not _is_number(value):
        return "not_number"
    if not math.isfinite(value):
        return "non_finite"
    if value > LOGPROB_CEILING:
        return "positive"
    return None


# Failure wording per kind: what is wrong with the values, and what it means.
_LOGPROB_WORDS = {
    "null": "are null (NaN is sent as null: the model computes NaN logits)",
    "non_finite": "are non-finite (NaN or Inf)",
    "positive": "are above 0, which no log-probability can be",
    "not_number": "are not numbers",
}


def check_logprobs(
    choice: Mapping[str, Any], requested: bool, completion_tokens: int | None = None
) -> list[str]:
    """Failures for impossible logprobs in ``choice['logprobs']['content']``; empty when they are sound.

    Every logprob (the token's and its top_logprobs') must be a finite number no higher than 0
    (``LOGPROB_CEILING``); each kind of bad value is counted and its first occurrence named, with its token.
    When logprobs were ``requested``, there must be one entry per generated token, ``completion_tokens``
    (``usage.completion_tokens``; None when the answer has no usage: then at least one entry).
    """
    logprobs = choice.get("logprobs")
    if logprobs is None:
        return ["logprobs were requested but the answer carries none"] if requested else []
    if not isinstance(logprobs, Mapping):
        return [f"'logprobs' is a {type(logprobs).__name__}, not an object"]
    entries = logprobs.get("content")
    if entries is None:
        return ["logprobs were requested but 'logprobs.content' is missing"] if requested else []
    if not isinstance(entries, list):
        return [f"'logprobs.content' is a {type(entries).__name__}, not a list"]

    failures = []
    if requested and completion_tokens is not None and len(entries) != completion_tokens:
        failures.append(
            f"logprobs cover {len(entries)} tokens but the answer has {completion_tokens} "
            "(usage.completion_tokens): the logprobs do not describe this answer"
        )
    elif requested and completion_tokens is None and not entries:
        failures.append("logprobs were requested but 'logprobs.content' is empty")

    seen = malformed = 0
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for number, entry in enumerate(entries, start=1):
        if not isinstance(entry, Mapping):
            malformed += 1
            continue
        values, bad_top = _logprob_values(entry, number)
        malformed += int(bad_top)
        for value, where in values:
            seen += 1
            kind = _logprob_kind(value)
            if kind is not None:
                counts[kind] = counts.get(kind, 0) + 1
                first.setdefault(kind, f"{_shown_logprob(value)} at {where}")

    for kind, words in _LOGPROB_WORDS.items():
        if kind in counts:
            failures.append(f"{counts[kind]} of {seen} logprobs {words}; the first is {first[kind]}")
    if malformed:
        failures.append(f"{malformed} logprobs entries are malformed (not objects or lists)")
    return failures


def _shown_logprob(value: object) -> str:
    """A logprob as a message shows it: null, nan, inf, 0.5, or the JSON text of a non-number."""
    if value is None:
        return "null"
    if _is_number(value):
        return repr(value)
    return _quote(json.dumps(value, default=str), 40)


# --- Python answers

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_LANGS = {"python", "py", "python3"}


def _parse_python(source: str) -> tuple[ast.Module | None, str | None]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source), None
    except SyntaxError as exc:
        return None, f"{exc.msg} (line {exc.lineno})"
    except (ValueError, RecursionError, MemoryError, TypeError, OverflowError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _function_problems(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [arg for arg in (arguments.vararg, arguments.kwarg) if arg is not None]
    missing = [arg.arg for arg in every if arg.annotation is None and arg.arg not in ("self", "cls")]
    problems = []
    if missing:
        problems.append(f"no type hint on {', '.join(missing)}")
    if function.returns is None:
        problems.append("no return type hint")
    if not (ast.get_docstring(function) or "").strip():
        problems.append("no docstring")
    return problems


def check_python_answer(content: str) -> str | None:
    """None when content holds a python code block that parses and defines a function with type hints on its
    arguments and return and a docstring; otherwise what is missing. The code is parsed, never run."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(content)]
    candidates = [body for lang, body in blocks if lang in _PYTHON_LANGS] or [
        body for lang, body in blocks if not lang
    ]
    if not candidates:
        if "```" in content:
            return "the python code block is not closed (answer cut off?) or not marked as python"
        return "no ```python code block in the content"

    best: str | None = None
    best_count = 0
    for source in candidates:
        tree, error = _parse_python(source)
        if tree is None:
            problem, count = f"the python code does not parse: {error}", 100
        else:
            functions = [
                node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            ]
            if not functions:
                problem, count = "the python code block defines no function", 50
            else:
                problem, count = "", 1000
                for function in functions:
                    problems = _function_problems(function)
                    if not problems:
                        return None
                    if len(problems) < count:
                        problem, count = f"function '{function.name}': {'; '.join(problems)}", len(problems)
        if best is None or count < best_count:
            best, best_count = problem, count
    return best


# --- Responses


def _verdict(failures: list[str], **fields: Any) -> Verdict:
    failures = [_clean(item) for item in failures if item]
    return Verdict(passed=not failures, failures=failures, **fields)


def scan_signatures(text: str) -> list[str]:
    """The meanings of the NaN/crash signatures found anywhere in text (each reported once)."""
    found = []
    for pattern, meaning in _JOURNAL_RES:
        if pattern.search(text) and meaning not in found:
            found.append(meaning)
    return found


def _signature_failures(text: str) -> list[str]:
    return [f"the error carries a crash signature: {meaning}" for meaning in scan_signatures(text)]


def _error_summary(obj: object) -> str | None:
    """The message of an sglang/OpenAI error body: {"object": "error", "message": ...} or {"error": {...}}."""
    if not isinstance(obj, Mapping):
        return None
    for candidate in (obj.get("message"), obj.get("detail"), obj.get("error")):
        if isinstance(candidate, Mapping):
            candidate = candidate.get("message")
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return None


def _decode(body: bytes | str | None) -> tuple[str | None, str | None]:
    if body is None:
        return "", None
    if isinstance(body, str):
        return body, None
    if not isinstance(body, (bytes, bytearray)):
        return None, f"the body is a {type(body).__name__}, not bytes"
    if len(body) > MAX_BODY_BYTES:
        return None, f"the body is larger than {MAX_BODY_BYTES} bytes"
    try:
        return bytes(body).decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return None, f"the body is not UTF-8 text ({exc.reason} at byte {exc.start})"


def _parse_json(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except (ValueError, RecursionError, MemoryError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"


def _judge(status: object, body: bytes | str | None, probe: Probe, logprobs_requested: bool) -> Verdict:
    text, decode_error = _decode(body)
    if not _is_int(status):
        return _verdict([f"no HTTP status ({status!r})"])
    if status in AUTH_STATUSES:
        return _verdict([auth_problem(status)])
    if status != 200:
        failures = [f"HTTP {status} (wanted 200)"]
        if text:
            obj, _ = _parse_json(text)
            summary = _error_summary(obj) or text.strip()
            if summary:
                failures[0] += f": {_quote(summary, 300)}"
            failures += _signature_failures(text)
        elif decode_error:
            failures.append(decode_error)
        return _verdict(failures)
    if text is None:
        return _verdict([str(decode_error)])
    if not text.strip():
        return _verdict(["HTTP 200 with an empty body"])
    if text.lstrip().startswith("data:"):
        return _verdict(["the body is an event stream, not one JSON answer (is 'stream' set?)"])
    obj, json_error = _parse_json(text)
    if json_error is not None:
        return _verdict([f"the body is not JSON ({json_error}); it starts {_quote(text.strip(), 80)}"])
    if not isinstance(obj, Mapping):
        return _verdict([f"the body is a JSON {type(obj).__name__}, not a chat-completion object"])

    choices = obj.get("choices")
    if choices is None:
        summary = _error_summary(obj)
        if summary is not None:
            failures = [f"the server answered with an error: {_quote(summary, 300)}"]
            failures += _signature_failures(text)
            return _verdict(failures)
        keys = ", ".join(sorted(str(key) for key in obj)[:10]) or "none"
        return _verdict([f"not a chat completion: no 'choices' (keys: {keys})"])
    if not isinstance(choices, list):
        return _verdict([f"'choices' is a {type(choices).__name__}, not a list"])
    if not choices:
        return _verdict(["'choices' is empty"])
    choice = choices[0]
    if not isinstance(choice, Mapping):
        return _verdict([f"choices[0] is a {type(choice).__name__}, not an object"])

    failures: list[str] = []
    raw_finish = choice.get("finish_reason")
    if isinstance(raw_finish, Mapping):  # the native /generate shape: {"type": "stop", ...}
        raw_finish = raw_finish.get("type")
    finish_reason = raw_finish if isinstance(raw_finish, str) else None
    matched = choice.get("matched_stop")
    matched_stop = matched if _is_int(matched) or isinstance(matched, str) else None
    usage = obj.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
    completion_tokens = tokens if _is_int(tokens) and tokens >= 0 else None

    message = choice.get("message")
    content: str | None = None
    reasoning: str | None = None
    if not isinstance(message, Mapping):
        failures.append("choices[0].message is missing or not an object")
    else:
        raw_content = message.get("content")
        raw_reasoning = message.get("reasoning_content")
        if raw_content is not None and not isinstance(raw_content, str):
            failures.append(f"content is a {type(raw_content).__name__}, not a string")
        else:
            content = raw_content
        if raw_reasoning is not None and not isinstance(raw_reasoning, str):
            failures.append(f"reasoning_content is a {type(raw_reasoning).__name__}, not a string")
        else:
            reasoning = raw_reasoning

    for label, value in (("content", content), ("reasoning_content", reasoning)):
        found = find_degenerate(value) if value else None
        if found:
            failures.append(f"degenerate output {found} in {label}, the silent-NaN symptom")

    failures += check_logprobs(choice, logprobs_requested, completion_tokens)

    if finish_reason is None:
        failures.append(f"finish_reason is missing (wanted '{probe.finish_reason}')")
    elif finish_reason != probe.finish_reason:
        hint = f": the answer hit max_tokens={probe.max_tokens}" if finish_reason == "length" else ""
        failures.append(f"finish_reason {finish_reason!r} (wanted '{probe.finish_reason}'){hint}")

    if isinstance(message, Mapping) and not (content or "").strip():
        what = "content is null" if content is None else "content is empty"
        if reasoning and reasoning.strip():
            what += " and the answer stayed in reasoning_content (thinking cut off or never closed)"
        failures.append(what)
    elif content:
        if probe.expect is not None and re.search(probe.expect, content) is None:
            failures.append(f"content {_quote(content.strip(), 80)} does not match expect /{probe.expect}/")
        if probe.expect_python:
            problem = check_python_answer(content)
            if problem:
                failures.append(f"expect_python: {problem}")

    return _verdict(
        failures,
        finish_reason=_clean(finish_reason) if finish_reason is not None else None,
        matched_stop=_clean(matched_stop) if isinstance(matched_stop, str) else matched_stop,
        content=truncate(content, CONTENT_KEEP),
        reasoning_content=truncate(reasoning, REASONING_KEEP),
        completion_tokens=completion_tokens,
    )


def judge_response(
    status: object, body: bytes | str | None, probe: Probe, logprobs_requested: bool = False
) -> Verdict:
    """Judge one raw HTTP answer to :func:`build_request`. Never raises."""
    try:
        return _judge(status, body, probe, logprobs_requested)
    except Exception as exc:  # the last guard: a check must report, never crash
        return _verdict([f"the judge could not read the answer ({type(exc).__name__}: {str(exc)[:200]})"])


def auth_problem(status: int) -> str:
    """The plain words for an HTTP 401 or 403: the key was refused. Names the variable, never the key."""
    return AUTH_PROBLEM.format(status=status)


def combine_answers(verdicts: Sequence[Verdict]) -> tuple[Verdict, int]:
    """One verdict for a probe sent several times at once (the concurrency probe), and how many of its
    answers failed. Every answer is judged: the probe passes only when all of them did; a failure quotes the
    first failed answer's symptoms and says how many of the answers failed. The fields shown (content,
    finish reason, ...) are those of the first failed answer, else the first answer."""
    if not verdicts:
        return _verdict(["no answer was judged"]), 0
    failed = [(index, verdict) for index, verdict in enumerate(verdicts) if not verdict.passed]
    shown = failed[0][1] if failed else verdicts[0]
    fields = {key: value for key, value in shown.to_dict().items() if key not in ("passed", "failures")}
    if not failed or len(verdicts) == 1:
        return _verdict(list(shown.failures), **fields), len(failed)
    first, verdict = failed[0]
    head = f"{len(failed)} of {len(verdicts)} answers sent at once failed; answer {first + 1}"
    return _verdict([f"{head}: {'; '.join(verdict.failures)}"], **fields), len(failed)


def judge_transport_error(message: str) -> Verdict:
    """A failed verdict for a request that got no HTTP answer at all."""
    return _verdict([message or "no HTTP answer"])


# --- Transport decisions (pure: they only look at exception objects)


def read_answer(
    read: Callable[[int], bytes], stopped: Callable[[], bool], count: Callable[[int], None]
) -> bytes:
    """An answer's body, read in chunks of ``READ_CHUNK`` up to ``MAX_BODY_BYTES`` + 1 bytes, until its end or
    until ``stopped()`` (the caller's deadline). ``count`` is told each chunk's size as it arrives, so that a
    caller that gives up at the deadline can say how much came. Shared by the module and the guard."""
    chunks = []
    received = 0
    while received <= MAX_BODY_BYTES and not stopped():
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
    text, error = _decode(body)
    if _is_int(status) and status in AUTH_STATUSES:
        return None, f"GET /v1/models: {auth_problem(status)}"
    if status != 200:
        return None, f"GET /v1/models answered HTTP {status}; set the 'model' option"
    if text is None:
        return None, f"GET /v1/models: {error}"
    obj, error = _parse_json(text)
    data = obj.get("data") if isinstance(obj, Mapping) else None
    if error or not isinstance(data, list) or not data:
        return None, "GET /v1/models did not list any model; set the 'model' option"
    first = data[0]
    model = first.get("id") if isinstance(first, Mapping) else None
    if not isinstance(model, str) or not model:
        return None, "GET /v1/models: the first model has no id; set the 'model' option"
    return model, None


def failure_message(
    url: str, model: str | None, results: Sequence[Mapping[str, Any]], journal_failures: Sequence[str] = ()
) -> str:
    """One line naming every failed probe and its symptoms, then the journal's findings."""
    failed = [result for result in results if not result.get("passed")]
    parts = [
        f"probe '{result.get('name')}': {'; '.join(result.get('failures') or ['failed'])}"
        for result in failed
    ]
    head = f"sglang inference check failed at {url}"
    if model:
        head += f" (model {model!r})"
    sections = []
    if failed:
        sections.append(f"{len(failed)} of {len(results)} probes failed: " + " | ".join(parts))
    if journal_failures:
        sections.append("journal: " + "; ".join(journal_failures))
    return _clean(f"{head}: " + " | ".join(sections or ["no reason recorded"]))


# --- Journal


def check_unit_name(unit: str) -> str | None:
    """None for a plausible systemd unit name, else why not (it becomes a command argument)."""
    if not unit or not UNIT_NAME.match(unit):
        return f"journal_unit {unit!r} is not a systemd unit name"
    return None


def parse_systemctl_show(text: str) -> dict[str, str]:
    """``systemctl show -p A -p B UNIT`` output (KEY=VALUE lines) as a dict."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


def journal_command(unit: str, props: Mapping[str, str]) -> tuple[list[str] | None, str]:
    """(journalctl arguments, what they cover) for the unit's log since its last start.

    The unit's current InvocationID selects exactly the messages of its current run. Without one (older
    systemd), the log of the unit since InactiveExitTimestamp (the moment it last started) is read. When the
    unit never started, the command is None.
    """
    invocation = props.get("InvocationID", "")
    if re.fullmatch(r"[0-9a-f]{32}", invocation):
        return (
            [
                "journalctl",
                "--no-pager",
                "-o",
                "short-iso",
                f"_SYSTEMD_INVOCATION_ID={invocation}",
            ],
            f"invocation {invocation}",
        )
    since = props.get("InactiveExitTimestamp", "") or props.get("ActiveEnterTimestamp", "")
    if since and since.lower() != "n/a":
        return (
            ["journalctl", "--no-pager", "-o", "short-iso", "-u", unit, "--since", since],
            f"since {since}",
        )
    return None, "the unit has not started"


def journal_read_problem(rc: int, stderr: str) -> str | None:
    """Why a journalctl run cannot be trusted, or None. Without the rights to read the system journal,
    journalctl prints a hint and shows nothing, which would look like a clean log."""
    hint = stderr.strip()
    if rc != 0:
        return f"journalctl failed (rc={rc}): {hint[:200] or 'no message'}"
    lowered = hint.lower()
    if "insufficient permissions" in lowered or "not seeing messages from other users" in lowered:
        return f"journalctl cannot read the unit's messages (run the task with become): {hint[:200]}"
    return None


def scan_journal(text: str) -> list[str]:
    """Lines of a server log that carry a NaN, assert or crash signature, as 'line N: meaning: excerpt'."""
    findings: list[str] = []
    total = 0
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = _ANSI.sub("", raw_line).strip()
        for pattern, meaning in _JOURNAL_RES:
            if pattern.search(line):
                total += 1
                if len(findings) < JOURNAL_MAX_FINDINGS:
                    findings.append(_clean(f"line {number}: {meaning}: {line[:200]}"))
                break
    if total > len(findings):
        findings.append(f"… and {total - len(findings)} more matching lines")
    return findings
