"""Judge what an SGLang server actually answers, not whether /health is green.

Pure functions, no I/O: the module ``sglang_inference_check`` and the guard daemon (roles/sglang_guard) do the
HTTP reads and hand the raw status and body to :func:`judge_response`. Nothing here raises on server input:
whatever the server sends, the judge returns a :class:`Verdict`, and a failed verdict always carries at least
one reason in plain words.

The inference judge is three module_utils, one a concern; the dependency runs one way, towards this one:

- ``judge_verdict`` (this file): judging an answer, and the words of a failure; it imports nothing of the
  project;
- ``judge_probes``: the probe definitions and the request they make, and the HTTP side of asking them
  (reading an answer, naming a transport error, the deadline, retries, the model id); imports from here;
- ``judge_journal``: reading the server's systemd journal for the crash signatures defined here; imports from
  here.

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

Crash signatures (:data:`CRASH_SIGNATURES`): the lines a NaN, a CUDA assert or a crash leaves; an error answer
that carries one says so in its verdict, and ``judge_journal`` looks for them in the server's journal.

Failure kinds (:attr:`Verdict.failure_kind`, :meth:`Verdict.classification`), for the removal policy the guard
and the validate gate share (``guard_policy.plan_removals``); the worst kind an answer shows wins:

- ``degenerate`` (:data:`DEGENERATE`): the silent-NaN symptoms - degenerate output in content or reasoning, a
  null, NaN, Inf or positive logprob, an error answer carrying a crash signature. Never the fault of a probe.
- ``broken`` (:data:`BROKEN`): no answer that can be judged - an HTTP error, a transport error, a timeout, a
  body that is not a chat completion, logprobs that do not cover the answer, a missing finish_reason, a cached
  prefix read back differently.
- ``wrong`` (:data:`WRONG`): a sound answer (finite logprobs, no repetition) that misses what the probe asks
  for: its ``expect`` or ``expect_python``, its ``finish_reason`` (a ``max_tokens`` too small), or empty
  content. The one kind an operator's typo in a probe can cause on a healthy replica.

A ``finish_reason`` of ``length`` alone is ``wrong``, not ``degenerate``: a NaN answer that runs to
max_tokens also shows ``!!!!`` or null logprobs, which are; a healthy model given too small a ``max_tokens``
shows only the length.
"""

from __future__ import annotations

import ast
import json
import math
import re
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# --- Thresholds

MAX_BODY_BYTES = 16 * 1024 * 1024  # a chat answer with logprobs for 4096 tokens is about 1 MB
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

# --- Failure kinds (module docstring), worst first

DEGENERATE = "degenerate"
BROKEN = "broken"
WRONG = "wrong"
FAILURE_KINDS = (DEGENERATE, BROKEN, WRONG)

# --- Keys

# Statuses that mean the server did not accept the request's credentials (sglang: 401 "Missing API key" or
# "Invalid API key"; a proxy in front may say 403). Never retried, never quoted (the body could echo the key).
AUTH_STATUSES = (401, 403)
AUTH_PROBLEM = (
    "the server refused the API key (HTTP {status}): check sglang_server_api_key / the key the check sends"
)

# --- Crash signatures

# (regex, what it means). Matched case-insensitively: per line in the journal (judge_journal.scan_journal, a
# line is reported once, for its first match), anywhere in an error answer (scan_signatures).
CRASH_SIGNATURES: tuple[tuple[str, str], ...] = (
    (r"probability tensor contains either", "NaN/Inf in the sampling probabilities"),
    (r"nan detected", "NaN logits detected"),
    (r"device-side assert", "CUDA device-side assert"),
    (r"CUDA error", "CUDA error"),
    (r"\bhit an exception\b", "an sglang process crashed"),
    (r"Traceback \(most recent call last\)", "Python traceback"),
    (r"SIGQUIT received", "an sglang child process failed"),
)
_SIGNATURE_RES = tuple((re.compile(pattern, re.IGNORECASE), meaning) for pattern, meaning in CRASH_SIGNATURES)


class Expectation(Protocol):
    """What the judge reads of a probe (a ``judge_probes.Probe``): what its answer must look like."""

    @property
    def max_tokens(self) -> int: ...

    @property
    def expect(self) -> str | None: ...

    @property
    def expect_python(self) -> bool: ...

    @property
    def finish_reason(self) -> str: ...


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
    failure_kind: str | None = None  # degenerate, broken or wrong (module docstring); None when passed

    @property
    def degenerate(self) -> bool:
        """Whether the answer shows a silent-NaN symptom (failure kind ``degenerate``)."""
        return self.failure_kind == DEGENERATE

    def classification(self) -> dict[str, Any]:
        """``{"failure_kind": ..., "degenerate": ...}``: what the removal policy reads of this verdict (kept
        out of :meth:`to_dict`, whose keys are the module's long-standing per-probe fields)."""
        return {"failure_kind": self.failure_kind, "degenerate": self.degenerate}

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


# --- Small helpers (judge_probes and judge_journal use them too)


def clean_text(text: str) -> str:
    """Replace lone surrogates (JSON may carry them) so the text always encodes as UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _quote(text: str, limit: int = 80) -> str:
    """Quote text for a message: repr of the first ``limit`` characters, with … when cut."""
    cut = text[:limit]
    return repr(clean_text(cut)) + ("…" if len(text) > limit else "")


def truncate(text: str | None, keep: int) -> str | None:
    """Keep at most ``keep`` characters: the head, or for long texts the head and tail around a marker."""
    if text is None or len(text) <= keep:
        return None if text is None else clean_text(text)
    half = keep // 2
    return clean_text(f"{text[:half]} …[{len(text) - 2 * half} chars cut]… {text[-half:]}")


def is_int(value: object) -> bool:
    """An int that is not a bool (JSON and YAML give both)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --- Crash signatures in a text


def scan_signatures(text: str) -> list[str]:
    """The meanings of the NaN/crash signatures found anywhere in text (each reported once)."""
    found = []
    for pattern, meaning in _SIGNATURE_RES:
        if pattern.search(text) and meaning not in found:
            found.append(meaning)
    return found


def first_signature(line: str) -> str | None:
    """The meaning of the first crash signature a line carries, or None (a journal line is reported once)."""
    for pattern, meaning in _SIGNATURE_RES:
        if pattern.search(line):
            return meaning
    return None


# --- Degenerate output

_CHAR_RUN = re.compile(rf"(\S)\1{{{RUN_MIN - 1},}}")
_UNIT_RUNS = tuple(
    (size, re.compile(rf"(.{{{size}}})\1{{{REPEAT_MIN - 1},}}", re.DOTALL)) for size in range(2, MAX_UNIT + 1)
)


def _sample(span: str) -> str:
    return repr(clean_text(span[:SAMPLE_CHARS])) + ("…" if len(span) > SAMPLE_CHARS else "")


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
    if not is_number(value):
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
    if is_number(value):
        return repr(value)
    return _quote(json.dumps(value, default=str), 40)


# --- Python answers

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_LANGS = {"python", "py", "python3"}


# One ast.parse at a time in this process. CPython 3.11 keeps the AST constructor's recursion depth in
# interpreter-wide state, and two threads parsing at once can make it raise a spurious
# "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905): a healthy prime answer
# judged by the guard's threads came out as "the judge could not read the answer" (make test, 2026-12-03).
_PARSE_LOCK = threading.Lock()


def _parse_python(source: str) -> tuple[ast.Module | None, str | None]:
    try:
        with _PARSE_LOCK, warnings.catch_warnings():
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


def worst_kind(kinds: Sequence[str | None]) -> str | None:
    """The worst of some failure kinds (``degenerate`` before ``broken`` before ``wrong``); None for none."""
    for kind in FAILURE_KINDS:
        if kind in kinds:
            return kind
    return None


def _verdict(failures: list[str], kind: str | None = None, **fields: Any) -> Verdict:
    """A verdict; a failed one of kind ``kind`` (default ``broken``). ``fields`` may carry another verdict's
    ``failure_kind``/``degenerate`` (a copy of its fields): ``kind`` decides."""
    fields.pop("degenerate", None)
    inherited = fields.pop("failure_kind", None)
    failures = [clean_text(item) for item in failures if item]
    if not failures:
        return Verdict(passed=True, failures=failures, **fields)
    chosen = kind or inherited
    return Verdict(
        passed=False, failures=failures, failure_kind=chosen if chosen in FAILURE_KINDS else BROKEN, **fields
    )


def _signature_failures(text: str) -> list[str]:
    return [f"the error carries a crash signature: {meaning}" for meaning in scan_signatures(text)]


def _signature_kind(text: str | None) -> str:
    """``degenerate`` for an error answer that carries a crash signature, else ``broken``."""
    return DEGENERATE if text and scan_signatures(text) else BROKEN


def logprobs_degenerate(choice: Mapping[str, Any]) -> bool:
    """Whether any logprob of ``choice`` (the token's or a top_logprob) is null, NaN, Inf or above 0."""
    logprobs = choice.get("logprobs")
    entries = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(entries, list):
        return False
    for number, entry in enumerate(entries, start=1):
        if isinstance(entry, Mapping):
            values = _logprob_values(entry, number)[0]
            if any(_logprob_kind(value) not in (None, "not_number") for value, _where in values):
                return True
    return False


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


def decode_body(body: bytes | str | None) -> tuple[str | None, str | None]:
    """(text, None) from a raw body (None reads as empty), or (None, why not): not bytes, larger than
    ``MAX_BODY_BYTES`` or not UTF-8."""
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


def parse_json(text: str) -> tuple[Any, str | None]:
    """(the JSON value, None), or (None, why it is not JSON)."""
    try:
        return json.loads(text), None
    except (ValueError, RecursionError, MemoryError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"


def _judge(status: object, body: bytes | str | None, probe: Expectation, logprobs_requested: bool) -> Verdict:
    text, decode_error = decode_body(body)
    if not is_int(status):
        return _verdict([f"no HTTP status ({status!r})"])
    if status in AUTH_STATUSES:
        return _verdict([auth_problem(status)])
    if status != 200:
        failures = [f"HTTP {status} (wanted 200)"]
        if text:
            obj = parse_json(text)[0]
            summary = _error_summary(obj) or text.strip()
            if summary:
                failures[0] += f": {_quote(summary, 300)}"
            failures += _signature_failures(text)
        elif decode_error:
            failures.append(decode_error)
        return _verdict(failures, _signature_kind(text))
    if text is None:
        return _verdict([str(decode_error)])
    if not text.strip():
        return _verdict(["HTTP 200 with an empty body"])
    if text.lstrip().startswith("data:"):
        return _verdict(["the body is an event stream, not one JSON answer (is 'stream' set?)"])
    obj, json_error = parse_json(text)
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
            return _verdict(failures, _signature_kind(text))
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
    kinds: list[str] = []  # the kind of each failure found below
    raw_finish = choice.get("finish_reason")
    if isinstance(raw_finish, Mapping):  # the native /generate shape: {"type": "stop", ...}
        raw_finish = raw_finish.get("type")
    finish_reason = raw_finish if isinstance(raw_finish, str) else None
    matched = choice.get("matched_stop")
    matched_stop = matched if is_int(matched) or isinstance(matched, str) else None
    usage = obj.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, Mapping) else None
    completion_tokens = tokens if is_int(tokens) and tokens >= 0 else None

    message = choice.get("message")
    content: str | None = None
    reasoning: str | None = None
    if not isinstance(message, Mapping):
        failures.append("choices[0].message is missing or not an object")
        kinds.append(BROKEN)
    else:
        raw_content = message.get("content")
        raw_reasoning = message.get("reasoning_content")
        if raw_content is not None and not isinstance(raw_content, str):
            failures.append(f"content is a {type(raw_content).__name__}, not a string")
            kinds.append(BROKEN)
        else:
            content = raw_content
        if raw_reasoning is not None and not isinstance(raw_reasoning, str):
            failures.append(f"reasoning_content is a {type(raw_reasoning).__name__}, not a string")
            kinds.append(BROKEN)
        else:
            reasoning = raw_reasoning

    for label, value in (("content", content), ("reasoning_content", reasoning)):
        found = find_degenerate(value) if value else None
        if found:
            failures.append(f"degenerate output {found} in {label}, the silent-NaN symptom")
            kinds.append(DEGENERATE)

    logprob_failures = check_logprobs(choice, logprobs_requested, completion_tokens)
    failures += logprob_failures
    if logprob_failures:
        kinds.append(DEGENERATE if logprobs_degenerate(choice) else BROKEN)

    if finish_reason is None:
        failures.append(f"finish_reason is missing (wanted '{probe.finish_reason}')")
        kinds.append(BROKEN)
    elif finish_reason != probe.finish_reason:
        hint = f": the answer hit max_tokens={probe.max_tokens}" if finish_reason == "length" else ""
        failures.append(f"finish_reason {finish_reason!r} (wanted '{probe.finish_reason}'){hint}")
        kinds.append(WRONG)

    if isinstance(message, Mapping) and not (content or "").strip():
        what = "content is null" if content is None else "content is empty"
        if reasoning and reasoning.strip():
            what += " and the answer stayed in reasoning_content (thinking cut off or never closed)"
        failures.append(what)
        kinds.append(WRONG)
    elif content:
        if probe.expect is not None and re.search(probe.expect, content) is None:
            failures.append(f"content {_quote(content.strip(), 80)} does not match expect /{probe.expect}/")
            kinds.append(WRONG)
        if probe.expect_python:
            problem = check_python_answer(content)
            if problem:
                failures.append(f"expect_python: {problem}")
                kinds.append(WRONG)

    return _verdict(
        failures,
        worst_kind(kinds),
        finish_reason=clean_text(finish_reason) if finish_reason is not None else None,
        matched_stop=clean_text(matched_stop) if isinstance(matched_stop, str) else matched_stop,
        content=truncate(content, CONTENT_KEEP),
        reasoning_content=truncate(reasoning, REASONING_KEEP),
        completion_tokens=completion_tokens,
    )


def judge_response(
    status: object, body: bytes | str | None, probe: Expectation, logprobs_requested: bool = False
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
        return _verdict(list(shown.failures), shown.failure_kind, **fields), len(failed)
    first, verdict = failed[0]
    head = f"{len(failed)} of {len(verdicts)} answers sent at once failed; answer {first + 1}"
    kind = worst_kind([item.failure_kind for _index, item in failed])
    return _verdict([f"{head}: {'; '.join(verdict.failures)}"], kind, **fields), len(failed)


# The prefix-reuse probe's follow-up has a symptom of its own: a garbled cached prefix, not a broken model.
FOLLOW_UP = "the follow-up on the cached prefix"
FOLLOW_UP_FAMILY = "a cached prefix read back wrong (sglang PRs #18904, #24198)"


def _agreeing(content: str | None) -> str:
    """The content as two answers are compared: words only, case folded."""
    return " ".join(re.findall(r"\w+", content or "")).casefold()


def judge_follow_up(first: Verdict, follow_up: Verdict) -> tuple[Verdict, int]:
    """One verdict for the prefix-reuse probe: the same prompt sent twice in a row, the second served from the
    radix cache's copy of the first one's prefix. Both answers are judged; the follow-up must also agree with
    the first (the same words). Returns the verdict and how many of the two answers failed. A failure of the
    follow-up alone, or a disagreement, says so: it is the cached-prefix bug family, not a broken model."""
    failed = int(not first.passed) + int(not follow_up.passed)
    shown = first if not first.passed else follow_up
    fields = {key: value for key, value in shown.to_dict().items() if key not in ("passed", "failures")}
    failures = list(first.failures)
    kind = worst_kind([first.failure_kind, follow_up.failure_kind])
    if not follow_up.passed:
        where = "" if not first.passed else " where the first answer passed"
        failures.append(f"{FOLLOW_UP} failed{where}: {'; '.join(follow_up.failures)}")
        if first.passed:
            failures[-1] += f" ({FOLLOW_UP_FAMILY})"
    elif first.passed and _agreeing(first.content) != _agreeing(follow_up.content):
        failed = 1
        failures.append(
            f"{FOLLOW_UP} answered {_quote(follow_up.content or '')} where the first answered "
            f"{_quote(first.content or '')}: {FOLLOW_UP_FAMILY}"
        )
        kind = BROKEN  # two sound answers that disagree: the cache, never the probe
    return _verdict(failures, kind, **fields), failed


def judge_transport_error(message: str) -> Verdict:
    """A failed verdict for a request that got no HTTP answer at all."""
    return _verdict([message or "no HTTP answer"])


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
    return clean_text(f"{head}: " + " | ".join(sections or ["no reason recorded"]))
