"""The inference judge, on real sglang 0.5.23 answers (healthy and NaN-poisoned) and on fuzzed input."""

from __future__ import annotations

import ast
import http.client
import json
import socket
import threading
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.judge_journal import (
    check_unit_name,
    journal_command,
    journal_read_problem,
    scan_journal,
)
from ansible_collections.glm5.deploy.plugins.module_utils.judge_probes import (
    DEFAULT_MAX_TOKENS,
    EXPECT_FOUR,
    Probe,
    ProbeError,
    build_request,
    deadline_problem,
    describe_exception,
    first_model_id,
    is_retryable_status,
    is_timeout,
    normalize_probe,
    normalize_probes,
)
from ansible_collections.glm5.deploy.plugins.module_utils.judge_verdict import (
    LOGPROB_CEILING,
    Verdict,
    check_logprobs,
    check_python_answer,
    failure_message,
    find_degenerate,
    is_degenerate,
    judge_follow_up,
    judge_response,
    judge_transport_error,
    truncate,
)
from ansible_collections.glm5.deploy.plugins.module_utils.systemd_unit import parse_systemctl_show
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_captures import load, names, server_log

FOUR, PRIME = normalize_probes(None)
HELLO = normalize_probe({"name": "hello", "prompt": "Say hello.", "expect": "(?i)hello"})
FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def judge(name: str, probe: Probe = FOUR, logprobs: bool = False) -> Verdict:
    capture = load(name)
    return judge_response(capture.status, capture.body, probe, logprobs_requested=logprobs)


def chat(content: Any, finish_reason: Any = "stop", reasoning: Any = None, **extra: Any) -> bytes:
    """A chat-completion body in sglang's shape."""
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": content, "reasoning_content": reasoning},
        "logprobs": None,
        "finish_reason": finish_reason,
        "matched_stop": 484 if finish_reason == "stop" else None,
        **extra,
    }
    return json.dumps(
        {"object": "chat.completion", "choices": [choice], "usage": {"completion_tokens": 10}}
    ).encode()


def joined(verdict: Verdict) -> str:
    return " | ".join(verdict.failures)


# --- Every real capture

# capture -> (probe, logprobs requested, passes, words every failure list must contain)
EXPECTED: dict[str, tuple[Probe, bool, bool, tuple[str, ...]]] = {
    "healthy_chat_2plus2_greedy": (FOUR, False, True, ()),
    "healthy_chat_2plus2_logprobs": (FOUR, True, True, ()),
    "healthy_chat_2plus2_length_in_reasoning": (
        FOUR,
        False,
        False,
        ("finish_reason 'length'", "content is empty"),
    ),
    "healthy_chat_2plus2_stream_sse": (FOUR, False, False, ("event stream",)),
    "healthy_chat_hello_enable_thinking_false": (HELLO, False, True, ()),
    "healthy_chat_prime_greedy": (PRIME, False, True, ()),
    "healthy_chat_prime_length": (PRIME, False, False, ("finish_reason 'length'", "not closed")),
    "healthy_generate_native": (FOUR, False, False, ("no 'choices'",)),
    "healthy_health": (FOUR, False, False, ("empty body",)),
    "healthy_health_generate": (FOUR, False, False, ("empty body",)),
    "healthy_metrics": (FOUR, False, False, ("not JSON",)),
    "healthy_model_info": (FOUR, False, False, ("no 'choices'",)),
    "healthy_server_info": (FOUR, False, False, ("no 'choices'",)),
    "healthy_v1_models": (FOUR, False, False, ("no 'choices'",)),
    "nan_lnf__chat_greedy": (FOUR, False, False, ("!!!!!!!!", "degenerate", "finish_reason 'length'")),
    "nan_lnf__chat_greedy_logprobs": (FOUR, True, False, ("!!!!!!!!", "logprobs are null")),
    "nan_lnf__chat_sampled_t0.8": (FOUR, False, False, ("!!!!!!!!", "degenerate")),
    "nan_lnf__chat_sampled_t0.8_top_p0.9": (FOUR, False, False, ("no HTTP status",)),
    "nan_lnf__health_after_greedy": (FOUR, False, False, ("empty body",)),
}


def test_every_capture_has_an_expectation() -> None:
    assert sorted(EXPECTED) == names()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_judge_on_real_capture(name: str) -> None:
    probe, logprobs, passes, words = EXPECTED[name]
    verdict = judge(name, probe, logprobs)
    assert verdict.passed is passes, verdict.failures
    assert verdict.passed == (not verdict.failures)
    for word in words:
        assert word in joined(verdict)


@pytest.mark.parametrize(
    "name", [name for name in sorted(EXPECTED) if load(name).headers.get("content-length")]
)
def test_capture_parser_reads_the_whole_body(name: str) -> None:
    capture = load(name)
    assert len(capture.body) == int(capture.headers["content-length"])


def test_healthy_two_plus_two_reports_what_it_saw() -> None:
    verdict = judge("healthy_chat_2plus2_greedy")
    assert verdict.to_dict() == {
        "passed": True,
        "failures": [],
        "finish_reason": "stop",
        "matched_stop": 484,
        "content": "4",
        "reasoning_content": "2+2 is 4.",
        "completion_tokens": 10,
    }


def test_healthy_prime_answer_passes_expect_python() -> None:
    verdict = judge("healthy_chat_prime_greedy", PRIME)
    assert verdict.passed
    assert verdict.content is not None and "def is_prime(n: int) -> bool:" in verdict.content


def test_length_inside_reasoning_fails_on_finish_reason_and_empty_content() -> None:
    verdict = judge("healthy_chat_2plus2_length_in_reasoning")
    assert not verdict.passed
    assert any("finish_reason 'length' (wanted 'stop')" in item for item in verdict.failures)
    assert any(
        item.startswith("content is empty") and "reasoning_content" in item for item in verdict.failures
    )
    assert verdict.reasoning_content == "2+2"


def test_nan_greedy_names_the_bangs_in_reasoning() -> None:
    verdict = judge("nan_lnf__chat_greedy")
    assert not verdict.passed
    assert verdict.failures[0] == (
        "degenerate output '!!!!!!!!!!!!!!!!' ('!' repeated 16 times) in reasoning_content, "
        "the silent-NaN symptom"
    )


def test_nan_logprobs_fail_on_null() -> None:
    verdict = judge("nan_lnf__chat_greedy_logprobs", logprobs=True)
    assert (
        "32 of 32 logprobs are null (NaN is sent as null: the model computes NaN logits); "
        "the first is null at token 1 ('!')"
    ) in verdict.failures


def test_healthy_answer_to_the_wrong_prompt_fails_on_expect() -> None:
    verdict = judge("healthy_chat_hello_enable_thinking_false", FOUR)
    assert verdict.failures == [
        f"content 'Hello! How can I help you today?' does not match expect /{EXPECT_FOUR}/"
    ]


def test_no_response_capture_is_a_transport_failure() -> None:
    assert load("nan_lnf__chat_sampled_t0.8_top_p0.9").status is None
    message, retryable = describe_exception(
        http.client.RemoteDisconnected("Remote end closed connection without response")
    )
    assert not retryable
    verdict = judge_transport_error(message)
    assert not verdict.passed
    assert "closed the connection without an answer" in verdict.failures[0]


# --- The seed's two responses


def test_seed_first_try_null_content_cut_reasoning_and_length_fails() -> None:
    body = chat(None, "length", reasoning="The user asks what 2+2 is. This is simple arithmetic: 2 plus 2")
    verdict = judge_response(200, body, FOUR)
    assert not verdict.passed
    assert verdict.content is None
    assert any("finish_reason 'length'" in item for item in verdict.failures)
    assert any(item.startswith("content is null") for item in verdict.failures)


def test_seed_answer_four_with_stop_passes() -> None:
    verdict = judge_response(200, chat("4", reasoning="2 + 2 = 4."), FOUR)
    assert verdict.passed, verdict.failures
    assert (verdict.content, verdict.finish_reason, verdict.matched_stop) == ("4", "stop", 484)


@pytest.mark.parametrize(
    "content", ["4", "4.", "**4**", "2 + 2 = 4", "2+2 is 4.", "The answer is 4.", " 4\n"]
)
def test_brief_right_answers_match_the_default_expect(content: str) -> None:
    assert judge_response(200, chat(content), FOUR).passed


@pytest.mark.parametrize("content", ["5", "44", "2+2=5", "4 or 5", "four", "Let me think."])
def test_wrong_answers_fail_the_default_expect(content: str) -> None:
    verdict = judge_response(200, chat(content), FOUR)
    assert not verdict.passed
    assert "does not match expect" in joined(verdict)


# --- Error bodies

NAN_ERROR = json.dumps(
    {
        "object": "error",
        "message": "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
).encode()


def test_error_body_with_nan_signature_is_named() -> None:
    verdict = judge_response(500, NAN_ERROR, FOUR)
    assert verdict.failures[0].startswith("HTTP 500 (wanted 200): 'RuntimeError: probability tensor contains")
    assert "the error carries a crash signature: NaN/Inf in the sampling probabilities" in verdict.failures


def test_error_object_with_status_200_fails_and_names_the_signature() -> None:
    verdict = judge_response(200, NAN_ERROR, FOUR)
    assert verdict.failures[0].startswith("the server answered with an error")
    assert any("NaN/Inf" in item for item in verdict.failures)


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_is_a_key_problem_and_the_body_is_not_quoted(status: int) -> None:
    body = json.dumps({"object": "error", "message": "Invalid API key sk-live-0123456789"}).encode()
    verdict = judge_response(status, body, FOUR, logprobs_requested=True)
    assert verdict.failures == [
        f"the server refused the API key (HTTP {status}): "
        "check sglang_server_api_key / the key the check sends"
    ]
    assert "sk-live" not in joined(verdict)
    assert first_model_id(status, body) == (
        None,
        f"GET /v1/models: the server refused the API key (HTTP {status}): "
        "check sglang_server_api_key / the key the check sends",
    )


def test_plain_text_error_and_empty_503() -> None:
    assert judge_response(502, b"Bad Gateway", FOUR).failures == ["HTTP 502 (wanted 200): 'Bad Gateway'"]
    assert judge_response(503, b"", FOUR).failures == ["HTTP 503 (wanted 200)"]


def test_device_side_assert_in_a_detail_body() -> None:
    body = json.dumps({"detail": "CUDA error: device-side assert triggered"}).encode()
    verdict = judge_response(500, body, FOUR)
    assert "the error carries a crash signature: CUDA device-side assert" in verdict.failures
    assert "the error carries a crash signature: CUDA error" in verdict.failures


# --- Shapes and types


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "JSON list"),
        (b'{"choices": {}}', "'choices' is a dict"),
        (b'{"choices": []}', "'choices' is empty"),
        (b'{"choices": [7]}', "choices[0] is a int"),
        (b'{"choices": [{"finish_reason": "stop"}]}', "choices[0].message is missing"),
        (b'{"choices": [{"message": {"content": 4}, "finish_reason": "stop"}]}', "content is a int"),
        (b'{"choices": [{"message": {"content": "4"}}]}', "finish_reason is missing"),
        (b'{"choices": [{"message": {"content": "4"}, "finish_reason": "abort"}]}', "finish_reason 'abort'"),
        (b"data: {}\n\ndata: [DONE]\n\n", "event stream"),
    ],
)
def test_wrong_shapes_fail_with_a_reason(body: bytes, words: str) -> None:
    verdict = judge_response(200, body, FOUR)
    assert not verdict.passed
    assert words in joined(verdict)


def test_non_integer_status_fails() -> None:
    assert judge_response(None, b"", FOUR).failures == ["no HTTP status (None)"]


def test_oversized_body_fails_without_parsing() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.judge_verdict import MAX_BODY_BYTES

    verdict = judge_response(200, b" " * (MAX_BODY_BYTES + 1), FOUR)
    assert "larger than" in joined(verdict)


def test_native_finish_reason_object_is_understood() -> None:
    verdict = judge_response(200, chat("4", finish_reason={"type": "stop", "matched": 484}), FOUR)
    assert verdict.passed and verdict.finish_reason == "stop"


def test_a_probe_may_require_another_finish_reason() -> None:
    probe = normalize_probe({"name": "cap", "prompt": "x", "finish_reason": "length", "max_tokens": 4})
    assert judge("healthy_chat_prime_length", probe).failures == []


def test_long_texts_are_truncated_head_and_tail() -> None:
    verdict = judge_response(200, chat("4", reasoning="a b " * 1000), FOUR)
    assert verdict.reasoning_content is not None and len(verdict.reasoning_content) < 450
    assert "chars cut" in verdict.reasoning_content
    assert truncate(None, 10) is None and truncate("short", 10) == "short"


# --- Degenerate output

NUMPY_STYLE = '''```python
def is_prime(n: int) -> bool:
    """Check primality.

    Parameters
    ----------
    n : int
        The number.

    Returns
    -------
    bool
        ========  whether n is prime
    """
    if n < 2:
        return False
    limit = 1000000000
    return all(n % d for d in range(2, int(n ** 0.5) + 1)) and n < limit
```'''

LEGIT = [
    "4",
    "2+2 is 4.",
    "",
    "        ",
    NUMPY_STYLE,
    load("healthy_chat_prime_greedy").body.decode(),
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "Title\n=====\n\nSome text under a reStructuredText title that is long enough to dominate.",
    "Wait... let me think........ yes, 4.",
    "abababab",  # 4 repetitions of a 2-character unit
    "x = [0, 0, 0, 0, 0, 0, 0, 0]\n" + "y = x\n" * 3 + "a longer tail of ordinary words " * 3,
]

DEGENERATE = [
    ("!!!!!!!!", "'!' repeated 8 times"),
    ("!!!!!!!!!!!!!!!!", "'!' repeated 16 times"),
    ("Z!!!!!!!!!!!!!!!", "'!' repeated 15 times"),
    ("The answer is 4 ????????", "'?' repeated 8 times"),
    ("=" * 40, "'=' repeated 40 times"),
    ("the " * 12, "'the ' repeated 12 times"),
    ("!?" * 10, "'!?' repeated 10 times"),
    ("Let me think about it carefully now. " + "and so " * 40, "repeated 40 times"),
]


@pytest.mark.parametrize("text", LEGIT)
def test_legitimate_text_is_not_degenerate(text: str) -> None:
    assert find_degenerate(text) is None


@pytest.mark.parametrize(("text", "words"), DEGENERATE)
def test_degenerate_text_is_named(text: str, words: str) -> None:
    found = is_degenerate(text)
    assert found is not None and words in found


def test_very_long_text_is_scanned_at_head_and_tail() -> None:
    found = find_degenerate("an ordinary sentence, " * 20_000 + "!" * 20)
    assert found is not None and "'!' repeated 20 times" in found


def test_degenerate_content_fails_even_with_stop() -> None:
    verdict = judge_response(200, chat("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"), FOUR)
    assert verdict.failures[0].startswith(
        "degenerate output '!!!!!!!!!!!!!!!!'… ('!' repeated 34 times) in content"
    )


# --- Logprobs


def test_nan_and_inf_literals_in_logprobs_fail() -> None:
    body = (
        b'{"choices": [{"message": {"content": "4"}, "finish_reason": "stop", "logprobs": {"content": ['
        b'{"token": "4", "logprob": NaN, "top_logprobs": [{"token": "4", "logprob": -Infinity}]},'
        b'{"token": "x", "logprob": "-1", "top_logprobs": []}]}}]}'
    )
    verdict = judge_response(200, body, FOUR, logprobs_requested=True)
    assert (
        "2 of 3 logprobs are non-finite (NaN or Inf); the first is nan at token 1 ('4')" in verdict.failures
    )
    assert "1 of 3 logprobs are not numbers; the first is '\"-1\"' at token 2 ('x')" in verdict.failures


def test_missing_logprobs_fail_only_when_requested() -> None:
    assert check_logprobs({"logprobs": None}, requested=False) == []
    assert check_logprobs({"logprobs": None}, requested=True) == [
        "logprobs were requested but the answer carries none"
    ]
    assert check_logprobs({"logprobs": {}}, requested=True) == [
        "logprobs were requested but 'logprobs.content' is missing"
    ]
    assert check_logprobs({"logprobs": {"content": [1, {"top_logprobs": 3}]}}, requested=False) == [
        "1 of 1 logprobs are null (NaN is sent as null: the model computes NaN logits); "
        "the first is null at token 2",
        "2 logprobs entries are malformed (not objects or lists)",
    ]
    assert check_logprobs({"logprobs": {"content": []}}, requested=True) == [
        "logprobs were requested but 'logprobs.content' is empty"
    ]


def test_healthy_logprobs_pass() -> None:
    body = json.loads(load("healthy_chat_2plus2_logprobs").body)
    assert check_logprobs(body["choices"][0], requested=True) == []


# --- Logprobs sanity: one entry per generated token, each finite and <= 0. The real captures first, then
# mutated copies of the healthy one (10 generated tokens, 10 entries, each with one top_logprob: 20 values).

HEALTHY_LOGPROBS = "healthy_chat_2plus2_logprobs"


def logprobs_answer(name: str = HEALTHY_LOGPROBS) -> dict[str, Any]:
    return json.loads(load(name).body)


def entries(document: dict[str, Any]) -> list[dict[str, Any]]:
    return document["choices"][0]["logprobs"]["content"]


@pytest.mark.parametrize(("name", "tokens"), [(HEALTHY_LOGPROBS, 10), ("nan_lnf__chat_greedy_logprobs", 16)])
def test_real_sglang_sends_one_logprob_entry_per_generated_token(name: str, tokens: int) -> None:
    """sglang 0.5.23 counts the stop token in completion_tokens and gives it a logprob entry too."""
    document = logprobs_answer(name)
    assert document["usage"]["completion_tokens"] == len(entries(document)) == tokens
    problems = check_logprobs(document["choices"][0], requested=True, completion_tokens=tokens)
    assert not [problem for problem in problems if "cover" in problem]


def test_the_healthy_capture_passes_the_logprobs_sanity_check() -> None:
    document = logprobs_answer()
    assert check_logprobs(document["choices"][0], requested=True, completion_tokens=10) == []
    assert judge(HEALTHY_LOGPROBS, logprobs=True).passed


def _set_logprob(index: int, value: Any, top: bool = False) -> Any:
    def mutate(document: dict[str, Any]) -> None:
        entry = entries(document)[index]
        (entry["top_logprobs"][0] if top else entry)["logprob"] = value

    return mutate


def _drop(keep: slice) -> Any:
    def mutate(document: dict[str, Any]) -> None:
        document["choices"][0]["logprobs"]["content"] = entries(document)[keep]

    return mutate


def _tokens(count: int) -> Any:
    def mutate(document: dict[str, Any]) -> None:
        document["usage"]["completion_tokens"] = count

    return mutate


COVER = "(usage.completion_tokens): the logprobs do not describe this answer"
# mutation of the healthy capture -> the one failure it must give (the probe is named by failure_message)
MUTATIONS: dict[str, tuple[Any, str]] = {
    "nan": (
        _set_logprob(2, float("nan")),
        "1 of 20 logprobs are non-finite (NaN or Inf); the first is nan at token 3 ('+')",
    ),
    "plus_half": (
        _set_logprob(1, 0.5),
        "1 of 20 logprobs are above 0, which no log-probability can be; the first is 0.5 at token 2 ('2')",
    ),
    "inf": (
        _set_logprob(5, float("inf")),
        "1 of 20 logprobs are non-finite (NaN or Inf); the first is inf at token 6 (' 4')",
    ),
    "minus_inf_in_top": (
        _set_logprob(4, float("-inf"), top=True),
        "1 of 20 logprobs are non-finite (NaN or Inf); the first is -inf at a top_logprob of token 5 (' is')",
    ),
    "positive_top": (
        _set_logprob(9, 3.0, top=True),
        "1 of 20 logprobs are above 0, which no log-probability can be; "
        "the first is 3.0 at a top_logprob of token 10 ('<|endoftext|>')",
    ),
    "missing_entries": (_drop(slice(0, 7)), f"logprobs cover 7 tokens but the answer has 10 {COVER}"),
    "missing_last": (_drop(slice(0, 9)), f"logprobs cover 9 tokens but the answer has 10 {COVER}"),
    "no_entries": (_drop(slice(0, 0)), f"logprobs cover 0 tokens but the answer has 10 {COVER}"),
    "more_tokens_than_entries": (_tokens(4096), f"logprobs cover 10 tokens but the answer has 4096 {COVER}"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_impossible_logprobs_fail_naming_the_probe_and_the_first_bad_value(mutation: str) -> None:
    mutate, failure = MUTATIONS[mutation]
    document = logprobs_answer()
    mutate(document)
    verdict = judge_response(200, json.dumps(document), FOUR, logprobs_requested=True)
    assert verdict.failures == [failure]
    message = failure_message("http://127.0.0.1:30000", "default", [{"name": "2+2", **verdict.to_dict()}])
    assert message.endswith(f"1 of 1 probes failed: probe '2+2': {failure}")


def test_several_bad_values_are_counted_and_the_first_is_named() -> None:
    document = logprobs_answer()
    for index, value in ((3, 0.25), (6, 0.5), (7, float("nan"))):
        entries(document)[index]["logprob"] = value
    assert check_logprobs(document["choices"][0], requested=True, completion_tokens=10) == [
        "1 of 20 logprobs are non-finite (NaN or Inf); the first is nan at token 8 ('</think>')",
        "2 of 20 logprobs are above 0, which no log-probability can be; the first is 0.25 at token 4 ('2')",
    ]


@pytest.mark.parametrize("value", [0.0, -0.0, 1.2e-7, LOGPROB_CEILING, -3.4028234663852886e38])
def test_float32_rounding_and_sglangs_clamp_are_not_impossible(value: float) -> None:
    """log(softmax) in float32 can land an ulp above 0; sglang clamps log(0) to float32's lowest value."""
    document = logprobs_answer()
    entries(document)[0]["logprob"] = value
    assert check_logprobs(document["choices"][0], requested=True, completion_tokens=10) == []


def test_the_count_is_judged_only_when_logprobs_were_requested() -> None:
    document = logprobs_answer()
    _drop(slice(0, 3))(document)
    assert check_logprobs(document["choices"][0], requested=False, completion_tokens=10) == []
    assert check_logprobs(document["choices"][0], requested=True, completion_tokens=None) == []
    _set_logprob(0, 0.5)(document)  # impossible values fail whether or not they were asked for
    assert check_logprobs(document["choices"][0], requested=False, completion_tokens=10) == [
        "1 of 6 logprobs are above 0, which no log-probability can be; "
        "the first is 0.5 at token 1 ('<think>')"
    ]


# --- Python answers


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (NUMPY_STYLE, None),
        ("Here:\n```py\nasync def f(x: int, *a: str, **k: bool) -> None:\n    '''Doc.'''\n```", None),
        ("```\ndef f(x: int) -> int:\n    '''Doc.'''\n    return x\n```", None),
        (
            "```python\nclass A:\n    def m(self, x: int) -> int:\n        '''Doc.'''\n        return x\n```",
            None,
        ),
        ("no code at all", "no ```python code block"),
        ("```python\ndef is_prime", "not closed"),
        ("```python\ndef f(:\n```", "does not parse"),
        ("```python\nx = 1\n```", "defines no function"),
        ("```python\ndef f(n):\n    '''Doc.'''\n```", "no type hint on n; no return type hint"),
        ("```python\ndef f(n: int) -> bool:\n    return True\n```", "function 'f': no docstring"),
        (
            "```python\ndef f(n: int) -> bool:\n    pass\n```\n```python\ndef g(n) -> bool:\n  '''D.'''\n```",
            "function 'f': no docstring",
        ),
    ],
)
def test_check_python_answer(content: str, problem: str | None) -> None:
    found = check_python_answer(content)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_python_answers_judged_in_threads_are_parsed_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard judges replicas in threads; CPython 3.11's ast.parse can raise a spurious SystemError when
    two threads parse at once (python/cpython#106905), so the judge parses one answer at a time."""
    from ansible_collections.glm5.deploy.plugins.module_utils import judge_verdict

    inside, most = [0], [0]
    parse = ast.parse

    def slow_parse(source: str, *args: Any, **kwargs: Any) -> ast.Module:
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        threading.Event().wait(0.02)  # long enough for the other threads to come in, were they let in
        inside[0] -= 1
        return parse(source, *args, **kwargs)

    monkeypatch.setattr(judge_verdict.ast, "parse", slow_parse)
    answer = '```python\ndef f(n: int) -> bool:\n    """Doc."""\n    return True\n```'
    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(check_python_answer, [answer] * 16))
    assert found == [None] * 16
    assert most[0] == 1


def test_python_with_a_null_byte_is_reported_not_raised() -> None:
    found = check_python_answer("```python\n\x00def f(): pass\n```")
    assert found is not None and "does not parse" in found


# --- Probes


def test_default_probes_are_the_seeds_two() -> None:
    assert [probe.name for probe in normalize_probes(None)] == ["2+2", "prime"]
    assert FOUR.messages == ({"role": "user", "content": "What is 2+2? Answer briefly."},)
    assert FOUR.expect == EXPECT_FOUR and FOUR.finish_reason == "stop" and FOUR.temperature == 0.0
    assert PRIME.expect_python and "prime" in PRIME.messages[0]["content"]
    assert FOUR.max_tokens == PRIME.max_tokens == DEFAULT_MAX_TOKENS


def test_ansible_style_probe_with_none_values_gets_the_defaults() -> None:
    raw = {
        "name": "p",
        "prompt": "hi",
        "messages": None,
        "max_tokens": None,
        "expect": None,
        "extra_body": None,
    }
    assert normalize_probe(raw) == Probe(name="p", messages=({"role": "user", "content": "hi"},))


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("a string", "probe #1 must be a dict"),
        ({"prompt": "x"}, "needs a 'name'"),
        ({"name": "p"}, "exactly one of 'prompt' or 'messages'"),
        ({"name": "p", "prompt": "x", "messages": [{"role": "user", "content": "x"}]}, "exactly one"),
        ({"name": "p", "prompt": "  "}, "'prompt' must be a non-empty string"),
        ({"name": "p", "messages": []}, "non-empty list"),
        ({"name": "p", "messages": ["hi"]}, "message 1 must be a dict"),
        ({"name": "p", "messages": [{"content": "hi"}]}, "message 1 needs a 'role'"),
        ({"name": "p", "messages": [{"role": "user"}]}, "message 1 needs a 'content'"),
        ({"name": "p", "prompt": "x", "max_tokens": 0}, "'max_tokens' must be a positive integer"),
        ({"name": "p", "prompt": "x", "max_tokens": True}, "'max_tokens' must be a positive integer"),
        ({"name": "p", "prompt": "x", "expect": "("}, "'expect' is not a valid regular expression"),
        ({"name": "p", "prompt": "x", "expect": 4}, "'expect' must be a regular expression string"),
        ({"name": "p", "prompt": "x", "expect_python": "yes"}, "'expect_python' must be true or false"),
        ({"name": "p", "prompt": "x", "finish_reason": "done"}, "'finish_reason' must be one of stop"),
        ({"name": "p", "prompt": "x", "temperature": -1}, "'temperature' must be a number >= 0"),
        ({"name": "p", "prompt": "x", "temperature": float("nan")}, "'temperature' must be a number >= 0"),
        ({"name": "p", "prompt": "x", "extra_body": []}, "'extra_body' must be a dict"),
        ({"name": "p", "prompt": "x", "extra_body": {"stream": True}}, "may not set 'stream'"),
        ({"name": "p", "prompt": "x", "extra_body": {"max_tokens": 9}}, "use the probe's 'max_tokens'"),
        ({"name": "p", "prompt": "x", "expected": "4"}, "unknown keys ['expected']"),
    ],
)
def test_bad_probes_are_explained(raw: object, words: str) -> None:
    with pytest.raises(ProbeError) as caught:
        normalize_probe(raw)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ([], "'probes' is empty"),
        ("2+2", "must be a list"),
        ([{"name": "a", "prompt": "x"}, {"name": "a", "prompt": "y"}], "'a' is used twice"),
    ],
)
def test_bad_probe_lists_are_explained(raw: object, words: str) -> None:
    with pytest.raises(ProbeError) as caught:
        normalize_probes(raw)
    assert words in str(caught.value)


def test_build_request() -> None:
    probe = normalize_probe(
        {
            "name": "hello",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Say hello."},
            ],
            "max_tokens": 64,
            "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
        }
    )
    assert build_request(probe, "default", logprobs=True) == {
        "model": "default",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}],
        "max_tokens": 64,
        "temperature": 0.0,
        "stream": False,
        "logprobs": True,
        "top_logprobs": 1,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    assert "logprobs" not in build_request(FOUR, "m", logprobs=False)


# --- Transport, models and messages


@pytest.mark.parametrize(
    ("exc", "words", "retryable"),
    [
        (
            urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")),
            "connection refused",
            True,
        ),
        (ConnectionRefusedError(111, "Connection refused"), "connection refused", True),
        (urllib.error.URLError("[Errno 111] Connection refused"), "connection refused", True),
        (http.client.RemoteDisconnected("closed"), "without an answer", False),
        (ConnectionResetError(104, "reset"), "connection was reset", False),
        (urllib.error.URLError(TimeoutError("timed out")), "timeout", False),
        (TimeoutError("timed out"), "timeout", False),
        (urllib.error.URLError(socket.gaierror(-2, "Name or service not known")), "cannot resolve", False),
        (ValueError("unknown url type"), "ValueError: unknown url type", False),
    ],
)
def test_describe_exception(exc: BaseException, words: str, retryable: bool) -> None:
    message, can_retry = describe_exception(exc)
    assert words in message
    assert can_retry is retryable


def test_is_timeout() -> None:
    assert is_timeout(TimeoutError("timed out"))
    assert is_timeout(urllib.error.URLError(TimeoutError("timed out")))
    assert not is_timeout(urllib.error.URLError(ConnectionRefusedError(111, "refused")))
    assert not is_timeout(ValueError("x"))


def test_deadline_problem_says_how_far_the_answer_got_and_after_how_long() -> None:
    assert deadline_problem(2, 2.0312, 200, 37) == (
        "no complete answer within the 2 s deadline: HTTP 200, then 37 bytes of the body received "
        "after 2.0 s (a stalled or trickling server)"
    )
    assert deadline_problem(300, 300.004, None, 0) == (
        "no complete answer within the 300 s deadline: 0 bytes received after 300.0 s, not even the status "
        "line and headers (a stalled or trickling server)"
    )
    assert "then 1 byte of the body" in deadline_problem(1.5, 1.5, 503, 1)


def test_only_503_is_a_retryable_status() -> None:
    assert is_retryable_status(503)
    assert not any(is_retryable_status(status) for status in (200, 400, 404, 500, 502, 504))


def test_first_model_id() -> None:
    capture = load("healthy_v1_models")
    assert first_model_id(capture.status, capture.body) == ("/srv/models/tiny-chat-gpt2", None)
    assert first_model_id(404, b"")[1] == "GET /v1/models answered HTTP 404; set the 'model' option"
    assert "did not list any model" in str(first_model_id(200, b'{"data": []}')[1])
    assert "did not list any model" in str(first_model_id(200, b"nope")[1])
    assert "has no id" in str(first_model_id(200, b'{"data": [{"id": 3}]}')[1])


def test_failure_message_names_probe_and_symptom() -> None:
    verdict = judge("nan_lnf__chat_greedy")
    message = failure_message(
        "http://127.0.0.1:30000",
        "default",
        [{"name": "2+2", **verdict.to_dict()}, {"name": "ok", "passed": True}],
    )
    assert message.startswith(
        "sglang inference check failed at http://127.0.0.1:30000 (model 'default'): 1 of 2 probes failed: "
        "probe '2+2': degenerate output '!!!!!!!!!!!!!!!!'"
    )
    assert "finish_reason 'length' (wanted 'stop')" in message
    assert failure_message("u", None, [], ["line 3: CUDA error: x"]) == (
        "sglang inference check failed at u: journal: line 3: CUDA error: x"
    )


# --- Journal


def test_scan_journal_finds_the_nan_crash() -> None:
    findings = scan_journal(server_log())
    assert [finding.split(": ")[1] for finding in findings] == [
        "an sglang process crashed",
        "NaN/Inf in the sampling probabilities",
        "an sglang child process failed",
    ]
    assert "probability tensor contains either `inf`, `nan` or element < 0" in findings[1]


def test_scan_journal_is_quiet_on_a_healthy_start() -> None:
    log = server_log()
    healthy = log[: log.index("Scheduler hit an exception")]
    assert "Ignore import error" in healthy and "Cannot detect CUDA architecture" in healthy
    assert scan_journal(healthy) == []


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "../aten/src/ATen/native/cuda/Indexing.cu:1422: block: [0,0,0] Assertion failed: device-side assert",
        "[2026-11-29 21:16:03] NaN detected in logits during warm-up",
        "Traceback (most recent call last):",
        "[\x1b[1;31m2026\x1b[0m] DataParallelController hit an exception: Traceback (most recent call last):",
    ],
)
def test_scan_journal_signatures(line: str) -> None:
    assert len(scan_journal(f"ok\n{line}\nok")) == 1


def test_scan_journal_caps_its_findings() -> None:
    findings = scan_journal("CUDA error\n" * 50)
    assert len(findings) == 21 and findings[-1] == "… and 30 more matching lines"


def test_journal_command_prefers_the_invocation() -> None:
    invocation = "0123456789abcdef0123456789abcdef"
    props = parse_systemctl_show(
        f"InvocationID={invocation}\nInactiveExitTimestamp=Sun 2026-11-29 21:13:22 UTC\nNRestarts=0\n"
    )
    args, scope = journal_command("sglang.service", props)
    assert args == ["journalctl", "--no-pager", "-o", "short-iso", f"_SYSTEMD_INVOCATION_ID={invocation}"]
    assert scope == f"invocation {invocation}"
    args, scope = journal_command("sglang.service", {"InactiveExitTimestamp": "Sun 2026-11-29 21:13:22 UTC"})
    assert args is not None and args[-4:] == [
        "-u",
        "sglang.service",
        "--since",
        "Sun 2026-11-29 21:13:22 UTC",
    ]
    assert journal_command("sglang.service", {"InvocationID": "", "InactiveExitTimestamp": "n/a"}) == (
        None,
        "the unit has not started",
    )


def test_unit_names_and_journal_problems() -> None:
    assert check_unit_name("sglang@node1.service") is None
    assert check_unit_name("--since=yesterday") is not None
    assert check_unit_name("") is not None
    assert journal_read_problem(0, "") is None
    assert "rc=1" in str(journal_read_problem(1, "Failed to open"))
    hint = "Hint: You are currently not seeing messages from other users and the system."
    assert "become" in str(journal_read_problem(0, hint))


# --- Fuzzing: the judge never raises, and a failure always has a reason


def assert_sound(verdict: Verdict) -> None:
    assert isinstance(verdict, Verdict)
    assert isinstance(verdict.passed, bool)
    assert verdict.passed == (not verdict.failures)
    assert all(isinstance(item, str) and item.strip() for item in verdict.failures)
    json.dumps(verdict.to_dict(), allow_nan=False).encode("utf-8")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=25,
)
# Keys of choices[0] that chat() does not set from its own arguments.
CHOICE_KEYS = st.sampled_from(["message", "matched_stop", "logprobs", "index", "delta"])


@FUZZ
@given(status=st.integers(min_value=100, max_value=599) | st.none(), body=st.binary(max_size=2048))
def test_fuzz_arbitrary_bytes(status: int | None, body: bytes) -> None:
    assert_sound(judge_response(status, body, FOUR, logprobs_requested=True))


@FUZZ
@given(value=json_values, logprobs=st.booleans())
def test_fuzz_arbitrary_json(value: Any, logprobs: bool) -> None:
    assert_sound(judge_response(200, json.dumps(value), PRIME, logprobs_requested=logprobs))


@FUZZ
@given(
    content=json_values,
    reasoning=json_values,
    finish=json_values,
    extra=st.dictionaries(CHOICE_KEYS, json_values),
)
def test_fuzz_chat_shaped_json(content: Any, reasoning: Any, finish: Any, extra: dict[str, Any]) -> None:
    verdict = judge_response(200, chat(content, finish, reasoning, **extra), FOUR, logprobs_requested=True)
    assert_sound(verdict)


MUTABLE = [
    "healthy_chat_2plus2_greedy",
    "healthy_chat_2plus2_logprobs",
    "healthy_chat_prime_greedy",
    "nan_lnf__chat_greedy_logprobs",
]


def _mutate(node: Any, data: st.DataObject, depth: int = 0) -> Any:
    """Walk down a random path of the JSON and drop, replace or keep what is there."""
    if isinstance(node, dict) and node and depth < 8:
        key = data.draw(st.sampled_from(sorted(node)))
        action = data.draw(st.sampled_from(["descend", "drop", "replace"]))
        node = dict(node)
        if action == "drop":
            del node[key]
        elif action == "replace":
            node[key] = data.draw(json_values)
        else:
            node[key] = _mutate(node[key], data, depth + 1)
        return node
    if isinstance(node, list) and node and depth < 8:
        index = data.draw(st.integers(0, len(node) - 1))
        node = list(node)
        action = data.draw(st.sampled_from(["descend", "drop", "replace"]))
        if action == "drop":
            del node[index]
        elif action == "replace":
            node[index] = data.draw(json_values)
        else:
            node[index] = _mutate(node[index], data, depth + 1)
        return node
    return data.draw(json_values)


@FUZZ
@given(name=st.sampled_from(MUTABLE), data=st.data(), rounds=st.integers(1, 3), logprobs=st.booleans())
def test_fuzz_mutated_real_responses(name: str, data: st.DataObject, rounds: int, logprobs: bool) -> None:
    document = json.loads(load(name).body)
    for _ in range(rounds):
        document = _mutate(document, data)
    probe = PRIME if "prime" in name else FOUR
    verdict = judge_response(200, json.dumps(document), probe, logprobs_requested=logprobs)
    assert_sound(verdict)
    if verdict.passed:
        assert verdict.finish_reason == "stop"
        assert verdict.content and verdict.content.strip()


@FUZZ
@given(text=st.text(max_size=400) | st.text(alphabet="!-= \nab", max_size=400))
def test_fuzz_text_checks_never_raise(text: str) -> None:
    found = find_degenerate(text)
    assert found is None or found.strip()
    problem = check_python_answer(f"```python\n{text}\n```")
    assert problem is None or problem.strip()
    assert isinstance(scan_journal(text), list)


@FUZZ
@given(
    raw=st.dictionaries(
        st.sampled_from(["name", "prompt", "messages", "max_tokens", "expect", "x"]), json_values
    )
)
def test_fuzz_probe_definitions_raise_only_probe_errors(raw: dict[str, Any]) -> None:
    try:
        probe = normalize_probe(raw)
    except ProbeError as exc:
        assert str(exc)
    else:
        assert probe.name and probe.messages


# --- The concurrency probe


def test_combine_answers_passes_only_when_every_answer_passed() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.judge_verdict import Verdict, combine_answers

    good = Verdict(passed=True, failures=[], content="4", finish_reason="stop")
    bad = Verdict(passed=False, failures=["degenerate output '!!!!'"], content="!!!!", finish_reason="length")
    verdict, failed = combine_answers([good, good, good])
    assert verdict.passed and failed == 0 and verdict.content == "4"
    verdict, failed = combine_answers([good, bad, good, bad])
    assert not verdict.passed and failed == 2 and verdict.content == "!!!!"
    assert verdict.failures == ["2 of 4 answers sent at once failed; answer 2: degenerate output '!!!!'"]
    verdict, failed = combine_answers([bad])
    assert verdict.failures == ["degenerate output '!!!!'"] and failed == 1
    verdict, failed = combine_answers([])
    assert not verdict.passed and verdict.failures == ["no answer was judged"]


def test_the_judge_files_depend_one_way_on_judge_verdict() -> None:
    """judge_probes and judge_journal build on judge_verdict; judge_verdict imports neither (no cycle)."""
    module_utils = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"

    def imported(name: str) -> set[str]:
        tree = ast.parse((module_utils / f"{name}.py").read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {alias.name.rpartition(".")[2] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module.rpartition(".")[2], *(alias.name for alias in node.names)}
        return found & {"judge_verdict", "judge_probes", "judge_journal"}

    assert imported("judge_verdict") == set()
    assert imported("judge_probes") == {"judge_verdict"}
    assert imported("judge_journal") == {"judge_verdict"}


# --- The prefix-reuse probe's two answers (issue 39 item 4)


def _answer(content: str, failures: list[str] | None = None) -> Verdict:
    return Verdict(passed=not failures, failures=list(failures or []), finish_reason="stop", content=content)


@pytest.mark.parametrize(
    ("first", "follow_up", "failed", "words"),
    [
        (_answer("tamarind"), _answer("Tamarind."), 0, []),
        (
            _answer("tamarind"),
            _answer("tamarind saffron"),
            1,
            ["answered 'tamarind saffron' where the first"],
        ),
        (
            _answer("tamarind"),
            _answer("!!!!", ["degenerate output"]),
            1,
            [
                "follow-up on the cached prefix failed where the first answer passed: degenerate output",
                "read back",
            ],
        ),
        (
            _answer("!!!!", ["degenerate output"]),
            _answer("!!!!", ["degenerate output"]),
            2,
            ["degenerate output", "follow-up on the cached prefix failed: degenerate output"],
        ),
    ],
)
def test_judge_follow_up(first: Verdict, follow_up: Verdict, failed: int, words: list[str]) -> None:
    """Both answers are judged; the follow-up must agree with the first in its words (case and punctuation
    aside); a failure of the follow-up alone is named as the cached-prefix family, a broken model as
    itself."""
    verdict, count = judge_follow_up(first, follow_up)
    assert count == failed and verdict.passed is (failed == 0)
    text = "; ".join(verdict.failures)
    for word in words:
        assert word in text, text
    if failed and first.passed:
        assert verdict.content == follow_up.content
