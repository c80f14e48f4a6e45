"""The sglang_inference_check module against a real HTTP server on 127.0.0.1 serving real sglang answers.

The module's main() runs in this process; the server runs in a thread and counts the requests it gets.
Only loopback addresses are used.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.glm5.deploy.plugins.module_utils.long_context import (
    MID_LENGTH,
    PREFIX_REUSE,
    recall_probe,
)
from chat_server import (
    HELLO,
    TRICKLE_BODY,
    TRICKLE_HEADERS,
    JsonHandler,
    free_port,
    prime_with_logprobs,
    serving,
)
from chat_server import no_proxy as no_proxy  # the autouse fixture: no proxy in this file
from project_modules import load_module
from sglang_captures import load, server_log

CHAT = "/v1/chat/completions"
MODELS = "/v1/models"
API_KEY = "sk-test-0123456789abcdef"


MODULE = load_module("sglang_inference_check")


@dataclass
class Reply:
    """One canned answer: a status and body, a pause first, a dropped connection (no answer at all), or a
    trickle (raw HTTP sent at once, then a byte at a time, never finished: :meth:`JsonHandler.trickle`)."""

    status: int = 200
    body: bytes = b""
    delay: float = 0.0
    drop: bool = False
    trickle: bytes | None = None

    @classmethod
    def capture(cls, name: str) -> Reply:
        capture = load(name)
        assert capture.status is not None
        return cls(capture.status, capture.body)


@dataclass
class FakeSglang:
    """Scripted replies per (method, path); the last reply of a script repeats. Records every request."""

    url: str = ""
    scripts: dict[tuple[str, str], list[Reply]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Requests being answered now, the most at once, and how many a reply waits for (at most 10 s) before it
    # is sent: requests sent one after the other never get there.
    in_flight: int = 0
    most_in_flight: int = 0
    gather: int = 0
    changed: threading.Condition = field(default_factory=threading.Condition)

    def arrive(self) -> None:
        with self.changed:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.in_flight >= self.gather, timeout=10 if self.gather else 0)

    def leave(self) -> None:
        with self.changed:
            self.in_flight -= 1

    def script(self, method: str, path: str, *replies: Reply) -> None:
        self.scripts[(method, path)] = list(replies)

    def next_reply(self, method: str, path: str, headers: dict[str, str], body: Any) -> Reply:
        with self.lock:
            self.requests.append((method, path, headers, body))
            script = self.scripts.get((method, path))
            if not script:
                return Reply(404, b'{"detail":"Not Found"}')
            return script.pop(0) if len(script) > 1 else script[0]

    def count(self, method: str, path: str) -> int:
        return sum(1 for request in self.requests if request[:2] == (method, path))

    def count_after_arrival(self, method: str, path: str, timeout: float = 30.0) -> int:
        """count() once at least one such request has reached the handler: a client that gave up at its
        deadline returns before a loaded machine's server thread has read the request it sent."""
        deadline = time.monotonic() + timeout
        while not self.count(method, path) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.count(method, path)

    def bodies(self, path: str) -> list[Any]:
        return [request[3] for request in self.requests if request[1] == path]


def _handler(fake: FakeSglang) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def answer(self, method: str, headers: dict[str, str], body: Any) -> None:
            reply = fake.next_reply(method, self.path, headers, body)
            fake.arrive()
            try:
                time.sleep(reply.delay)
            finally:
                fake.leave()
            if reply.trickle is not None:
                self.trickle(reply.trickle)
                return
            if reply.drop:
                self.close_connection = True
                return
            self.reply(reply.status, reply.body)

    return Handler


@pytest.fixture
def server() -> Iterator[FakeSglang]:
    fake = FakeSglang()
    fake.script("GET", MODELS, Reply.capture("healthy_v1_models"))
    with serving(_handler(fake)) as url:
        fake.url = url
        yield fake


def run(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """Run the module's main() with these args; return its JSON output plus 'rc'."""
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        MODULE.main()
    output = json.loads(capsys.readouterr().out)
    output["rc"] = exited.value.code
    return output


def two_plus_two(**extra: Any) -> list[dict[str, Any]]:
    return [{"name": "2+2", "prompt": "What is 2+2? Answer briefly.", "expect": r"^\s*4\.?\s*$", **extra}]


# --- Healthy answers


def test_default_probes_pass_on_the_healthy_model(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(
        "POST",
        CHAT,
        Reply.capture("healthy_chat_2plus2_logprobs"),
        Reply(200, prime_with_logprobs()),
    )
    result = run({"url": server.url + "/", "api_key": API_KEY, "retry_delay": 0}, capsys)

    assert result["rc"] == 0, result
    assert (result["passed"], result["changed"], result["model"]) == (
        True,
        False,
        "/srv/models/tiny-chat-gpt2",
    )
    assert [(probe["name"], probe["passed"], probe["attempts"]) for probe in result["probes"]] == [
        ("2+2", True, 1),
        ("prime", True, 1),
    ]
    first = result["probes"][0]
    assert (first["content"], first["finish_reason"], first["matched_stop"]) == ("4", "stop", 484)
    assert (first["reasoning_content"], first["completion_tokens"], first["failures"]) == (
        "2+2 is 4.",
        10,
        [],
    )
    assert isinstance(first["latency_s"], float)

    requests = server.bodies(CHAT)
    assert [body["messages"][0]["content"] for body in requests] == [
        "What is 2+2? Answer briefly.",
        "Write a Python function that checks if a number is prime. Include docstring and type hints.",
    ]
    assert all(body["model"] == "/srv/models/tiny-chat-gpt2" for body in requests)
    assert all(body["logprobs"] is True and body["temperature"] == 0 for body in requests)
    assert all(request[2]["Authorization"] == f"Bearer {API_KEY}" for request in server.requests)
    assert API_KEY not in json.dumps(result)


def test_check_mode_asks_too(server: FakeSglang, capsys: pytest.CaptureFixture[str]) -> None:
    server.script("POST", CHAT, Reply.capture("healthy_chat_2plus2_greedy"))
    args = {"url": server.url, "model": "default", "probes": two_plus_two(), "logprobs": False}
    result = run({**args, "_ansible_check_mode": True}, capsys)
    assert result["rc"] == 0 and result["passed"] and not result["changed"]
    assert server.count("POST", CHAT) == 1
    assert server.count("GET", MODELS) == 0


def test_probe_with_thinking_switched_off(server: FakeSglang, capsys: pytest.CaptureFixture[str]) -> None:
    server.script("POST", CHAT, Reply.capture("healthy_chat_hello_enable_thinking_false"))
    result = run({"url": server.url, "model": "default", "probes": [HELLO], "logprobs": False}, capsys)
    assert result["rc"] == 0 and result["passed"]
    body = server.bodies(CHAT)[0]
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["max_tokens"] == 64 and "logprobs" not in body


# --- Bad answers are reported, never retried


def test_nan_model_fails_naming_bangs_and_null_logprobs(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script("POST", CHAT, Reply.capture("nan_lnf__chat_greedy_logprobs"))
    result = run({"url": server.url, "probes": two_plus_two(), "retries": 5, "retry_delay": 0}, capsys)

    assert result["rc"] == 1 and result["failed"] and not result["passed"]
    assert server.count("POST", CHAT) == 1
    message = result["msg"]
    assert message.startswith(
        f"sglang inference check failed at {server.url} (model '/srv/models/tiny-chat-gpt2')"
    )
    assert (
        "probe '2+2': degenerate output '!!!!!!!!!!!!!!!!' ('!' repeated 16 times) in reasoning_content"
        in message
    )
    assert "32 of 32 logprobs are null" in message
    assert "finish_reason 'length' (wanted 'stop')" in message
    probe = result["probes"][0]
    assert (probe["passed"], probe["attempts"], probe["content"], probe["finish_reason"]) == (
        False,
        1,
        "",
        "length",
    )


def test_the_concurrency_probe_sends_at_once_and_judges_every_answer(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    """concurrency 4: four copies of the probe are in flight together (the fake server holds each reply until
    four requests are in, at most 10 s: sent one after the other, one at a time would be), and one poisoned
    answer among them fails the probe, counted."""
    healthy = Reply.capture("healthy_chat_2plus2_greedy")
    poisoned = Reply.capture("nan_lnf__chat_greedy_logprobs")
    server.script("POST", CHAT, healthy, healthy, poisoned, healthy)
    server.gather = 4
    args = {"url": server.url, "probes": two_plus_two(), "logprobs": False, "concurrency": 4}
    result = run(args, capsys)
    assert server.most_in_flight == 4, "the four requests were not sent at once"
    server.gather = 0
    assert server.count("POST", CHAT) == 4
    assert result["rc"] == 1 and not result["passed"]
    probe = result["probes"][0]
    assert (probe["answers"], probe["failed_answers"]) == (4, 1)
    assert (
        "1 of 4 answers sent at once failed; answer " in result["msg"]
        and "degenerate output" in result["msg"]
    )
    server.script("POST", CHAT, healthy)
    again = run(args, capsys)
    assert again["rc"] == 0 and again["probes"][0]["failed_answers"] == 0


def test_the_long_context_probe_is_sent_once_after_the_others_and_judged(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    """long_context_words 300 adds the recall probe: 2+2 goes twice at once, the long prompt once (its planted
    passphrase in the request), and an answer that is not the passphrase fails it, named."""
    server.script("POST", CHAT, Reply.capture("healthy_chat_2plus2_greedy"))
    args = {"url": server.url, "probes": two_plus_two(), "logprobs": False, "concurrency": 2}
    result = run({**args, "long_context_words": 300}, capsys)
    bodies = server.bodies(CHAT)
    assert len(bodies) == 3
    long_prompt = bodies[2]["messages"][0]["content"]
    assert len(long_prompt.split()) >= 300 and "The passphrase is tamarind." in long_prompt
    assert [probe["name"] for probe in result["probes"]] == ["2+2", "long-context"]
    assert result["rc"] == 1 and "answers" not in result["probes"][1]
    assert "1 of 2 probes failed: probe 'long-context': content '4' does not match expect" in result["msg"]


def answering(content: str) -> Reply:
    """The healthy 2+2 capture with its content replaced (logprobs off: its logprobs are the 2+2 answer's)."""
    reply = Reply.capture("healthy_chat_2plus2_greedy")
    body = json.loads(reply.body)
    body["choices"][0]["message"]["content"] = content
    return Reply(reply.status, json.dumps(body).encode())


def test_the_mid_length_and_prefix_reuse_probes_are_sent_and_judged(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39 item 4: mid_length_words adds a recall probe sent like the short ones (twice at once here);
    prefix_reuse_words adds one sent twice in a row, the same body both times, and both answers judged."""
    mid = recall_probe(100, name=MID_LENGTH)["answer"]
    reuse = recall_probe(200, name=PREFIX_REUSE)["answer"]
    healthy = Reply.capture("healthy_chat_2plus2_greedy")
    server.script("POST", CHAT, healthy, healthy, answering(mid), answering(mid), answering(reuse))
    args = {"url": server.url, "probes": two_plus_two(), "logprobs": False, "concurrency": 2}
    result = run({**args, "mid_length_words": 100, "prefix_reuse_words": 200}, capsys)
    assert result["rc"] == 0, result["msg"]
    assert [probe["name"] for probe in result["probes"]] == ["2+2", "mid-length", "prefix-reuse"]
    bodies = server.bodies(CHAT)
    assert len(bodies) == 6 and bodies[4] == bodies[5]
    mid_prompt, reuse_prompt = bodies[2]["messages"][0]["content"], bodies[4]["messages"][0]["content"]
    assert 100 <= len(mid_prompt.split()) < 200 <= len(reuse_prompt.split())
    assert f"The passphrase is {reuse}." in reuse_prompt
    probes = {probe["name"]: probe for probe in result["probes"]}
    assert (probes["mid-length"]["answers"], probes["mid-length"]["failed_answers"]) == (2, 0)
    assert (probes["prefix-reuse"]["answers"], probes["prefix-reuse"]["failed_answers"]) == (2, 0)
    assert probes["prefix-reuse"]["content"] == probes["prefix-reuse"]["follow_up_content"] == reuse


def test_a_garbled_follow_up_on_the_cached_prefix_fails_with_its_own_symptom(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first answer is right, the second (served from the cached prefix) is the NaN symptom: the probe
    fails, and says it was the follow-up."""
    reuse = recall_probe(200, name=PREFIX_REUSE)["answer"]
    healthy = Reply.capture("healthy_chat_2plus2_greedy")
    server.script("POST", CHAT, healthy, answering(reuse), answering("!" * 16))
    result = run(
        {"url": server.url, "probes": two_plus_two(), "logprobs": False, "prefix_reuse_words": 200}, capsys
    )
    assert result["rc"] == 1
    probe = result["probes"][1]
    assert (probe["name"], probe["passed"], probe["failed_answers"]) == ("prefix-reuse", False, 1)
    assert probe["content"] == "!" * 16 and probe["follow_up_content"] == "!" * 16
    assert (
        "probe 'prefix-reuse': the follow-up on the cached prefix failed where the first answer passed: "
        "degenerate output" in result["msg"]
    )
    assert "a cached prefix read back wrong" in result["msg"]


@pytest.mark.parametrize("option", ["mid_length_words", "prefix_reuse_words"])
def test_a_recall_probe_too_short_is_refused_before_any_request(
    server: FakeSglang, capsys: pytest.CaptureFixture[str], option: str
) -> None:
    result = run({"url": server.url, "probes": two_plus_two(), option: 49}, capsys)
    assert result["rc"] == 1 and server.count("POST", CHAT) == 0
    assert f"{option} must be a whole number of 50 or more, not 49" in result["msg"]


@pytest.mark.parametrize("words", [-1, 10, 49])
def test_a_long_context_too_short_is_refused_before_any_request(
    server: FakeSglang, capsys: pytest.CaptureFixture[str], words: int
) -> None:
    result = run({"url": server.url, "probes": two_plus_two(), "long_context_words": words}, capsys)
    assert result["rc"] == 1 and server.count("POST", CHAT) == 0
    assert f"long_context_words must be a whole number of 50 or more, not {words}" in result["msg"]


def test_reasoning_cut_by_max_tokens_fails(server: FakeSglang, capsys: pytest.CaptureFixture[str]) -> None:
    server.script("POST", CHAT, Reply.capture("healthy_chat_2plus2_length_in_reasoning"))
    result = run({"url": server.url, "probes": two_plus_two(max_tokens=4), "logprobs": False}, capsys)
    assert result["rc"] == 1
    assert "finish_reason 'length' (wanted 'stop'): the answer hit max_tokens=4" in result["msg"]
    assert "content is empty and the answer stayed in reasoning_content" in result["msg"]
    assert server.bodies(CHAT)[0]["max_tokens"] == 4


def test_one_bad_probe_fails_the_task_and_both_are_reported(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script(
        "POST", CHAT, Reply.capture("healthy_chat_2plus2_greedy"), Reply.capture("healthy_chat_prime_length")
    )
    result = run({"url": server.url, "model": "default", "logprobs": False}, capsys)
    assert result["rc"] == 1
    assert [probe["passed"] for probe in result["probes"]] == [True, False]
    assert "1 of 2 probes failed: probe 'prime': finish_reason 'length'" in result["msg"]
    assert "2+2" not in result["msg"].split("probes failed")[1]


def test_error_with_nan_signature_is_not_retried(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    error = {
        "object": "error",
        "message": "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
        "code": 500,
    }
    server.script("POST", CHAT, Reply(500, json.dumps(error).encode()))
    result = run({"url": server.url, "model": "default", "probes": two_plus_two(), "retry_delay": 0}, capsys)
    assert result["rc"] == 1
    assert server.count("POST", CHAT) == 1
    assert "HTTP 500 (wanted 200)" in result["msg"]
    assert "the error carries a crash signature: NaN/Inf in the sampling probabilities" in result["msg"]


def test_crashing_server_that_drops_the_connection_is_not_retried(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script("POST", CHAT, Reply(drop=True))
    result = run({"url": server.url, "model": "default", "probes": two_plus_two(), "retry_delay": 0}, capsys)
    assert result["rc"] == 1
    assert server.count("POST", CHAT) == 1
    assert "closed the connection without an answer" in result["msg"]


def test_timeout_is_not_retried(server: FakeSglang, capsys: pytest.CaptureFixture[str]) -> None:
    server.script("POST", CHAT, Reply.capture("healthy_chat_2plus2_greedy"), Reply(delay=0))
    server.scripts[("POST", CHAT)][0].delay = 2.0
    args = {"url": server.url, "model": "default", "probes": two_plus_two(), "timeout": 1, "retry_delay": 0}
    result = run(args, capsys)
    assert result["rc"] == 1
    assert server.count_after_arrival("POST", CHAT) == 1
    assert (
        "probe '2+2': no complete answer within the 1 s deadline: 0 bytes received after 1." in result["msg"]
    )


# --- The deadline: a server that trickles bytes forever cannot hold the task

DEADLINE = 2  # seconds; the trickling server sends a byte every 0.1 s, far inside any socket timeout
SLOW = {"name": "slow", "prompt": "What is 2+2? Answer briefly.", "expect": r"^\s*4\.?\s*$"}


def test_a_trickled_body_is_stopped_at_the_deadline_and_the_next_probe_runs(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script("POST", CHAT, Reply(trickle=TRICKLE_BODY), Reply.capture("healthy_chat_2plus2_greedy"))
    args = {"url": server.url, "model": "default", "probes": [SLOW, *two_plus_two()], "logprobs": False}
    started = time.monotonic()
    result = run({**args, "timeout": DEADLINE, "retry_delay": 0}, capsys)
    elapsed = time.monotonic() - started

    assert elapsed < DEADLINE + 4, elapsed  # the trickle alone would run for TRICKLE_LIMIT (30 s)
    assert result["rc"] == 1
    found = re.search(
        r"probe 'slow': no complete answer within the 2 s deadline: HTTP 200, then (\d+) bytes of the body "
        r"received after (\d+\.\d) s \(a stalled or trickling server\)",
        result["msg"],
    )
    assert found, result["msg"]
    assert int(found.group(1)) >= 8  # the 8 bytes sent at once, and what trickled after them
    assert DEADLINE <= float(found.group(2)) < DEADLINE + 1
    assert [(p["name"], p["passed"], p["attempts"]) for p in result["probes"]] == [
        ("slow", False, 1),
        ("2+2", True, 1),
    ]
    assert server.count("POST", CHAT) == 2  # a missed deadline is not retried


def test_headers_that_never_end_are_stopped_at_the_deadline(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script("POST", CHAT, Reply(trickle=TRICKLE_HEADERS))
    args = {"url": server.url, "model": "default", "probes": [SLOW], "timeout": DEADLINE, "retry_delay": 0}
    started = time.monotonic()
    result = run(args, capsys)
    assert time.monotonic() - started < DEADLINE + 4
    assert result["rc"] == 1
    assert (
        "probe 'slow': no complete answer within the 2 s deadline: 0 bytes received after 2." in result["msg"]
    )
    assert "not even the status line and headers (a stalled or trickling server)" in result["msg"]


def test_a_trickled_model_listing_is_stopped_at_the_deadline(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script("GET", MODELS, Reply(trickle=TRICKLE_BODY))
    started = time.monotonic()
    result = run({"url": server.url, "timeout": DEADLINE, "retry_delay": 0}, capsys)
    assert time.monotonic() - started < DEADLINE + 4
    assert result["rc"] == 1
    assert result["msg"].startswith(
        f"cannot list the models at {server.url}/v1/models: no complete answer within the 2 s deadline: "
        "HTTP 200, then "
    )
    assert server.count("POST", CHAT) == 0


# --- A refused key is a key problem


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_is_reported_as_a_key_problem_without_the_key(
    status: int, server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    echo = json.dumps({"object": "error", "message": f"Invalid API key {API_KEY}"}).encode()
    server.script("POST", CHAT, Reply(status, echo))
    args = {"url": server.url, "api_key": API_KEY, "model": "default", "probes": two_plus_two()}
    result = run({**args, "retry_delay": 0}, capsys)
    assert result["rc"] == 1
    assert result["probes"][0]["failures"] == [
        f"the server refused the API key (HTTP {status}): "
        "check sglang_server_api_key / the key the check sends"
    ]
    assert result["msg"].endswith(f"probe '2+2': {result['probes'][0]['failures'][0]}")
    assert server.count("POST", CHAT) == 1  # never retried
    assert API_KEY not in json.dumps(result) and "Invalid API key" not in json.dumps(result)


def test_a_refused_key_while_listing_the_models_is_a_key_problem(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script("GET", MODELS, Reply(401, b'{"object": "error", "message": "Missing API key"}'))
    result = run({"url": server.url, "retry_delay": 0}, capsys)
    assert result["rc"] == 1
    assert result["msg"] == (
        f"{server.url}: GET /v1/models: the server refused the API key (HTTP 401): "
        "check sglang_server_api_key / the key the check sends"
    )


# --- Logprobs that cannot be


def test_a_positive_logprob_fails_naming_the_probe_and_the_value(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(load("healthy_chat_2plus2_logprobs").body)
    document["choices"][0]["logprobs"]["content"][1]["logprob"] = 0.5
    server.script("POST", CHAT, Reply(200, json.dumps(document).encode()))
    result = run({"url": server.url, "model": "default", "probes": two_plus_two()}, capsys)
    assert result["rc"] == 1
    assert result["msg"].endswith(
        "probe '2+2': 1 of 20 logprobs are above 0, which no log-probability can be; "
        "the first is 0.5 at token 2 ('2')"
    )


def test_logprobs_that_miss_generated_tokens_fail(
    server: FakeSglang, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(load("healthy_chat_2plus2_logprobs").body)
    document["choices"][0]["logprobs"]["content"] = []
    server.script("POST", CHAT, Reply(200, json.dumps(document).encode()))
    result = run({"url": server.url, "model": "default", "probes": two_plus_two()}, capsys)
    assert result["rc"] == 1
    assert (
        "probe '2+2': logprobs cover 0 tokens but the answer has 10 (usage.completion_tokens)"
        in result["msg"]
    )


# --- Retries: only a refused connection or a 503


def test_503_then_200_is_retried_and_passes(server: FakeSglang, capsys: pytest.CaptureFixture[str]) -> None:
    server.script("GET", MODELS, Reply(503), Reply.capture("healthy_v1_models"))
    server.script("POST", CHAT, Reply(503), Reply(503), Reply.capture("healthy_chat_2plus2_greedy"))
    result = run({"url": server.url, "probes": two_plus_two(), "retry_delay": 0, "logprobs": False}, capsys)
    assert result["rc"] == 0, result.get("msg")
    assert server.count("GET", MODELS) == 2
    assert server.count("POST", CHAT) == 3
    assert result["probes"][0]["attempts"] == 3


def test_503_beyond_the_retries_fails(server: FakeSglang, capsys: pytest.CaptureFixture[str]) -> None:
    server.script("POST", CHAT, Reply(503))
    args = {"url": server.url, "model": "default", "probes": two_plus_two(), "retries": 2, "retry_delay": 0}
    result = run(args, capsys)
    assert result["rc"] == 1
    assert server.count("POST", CHAT) == 3
    assert "probe '2+2': HTTP 503 (wanted 200); gave up after 3 attempts" in result["msg"]


def test_refused_connection_is_retried_then_reported(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    args = {"url": url, "model": "default", "probes": two_plus_two(), "retries": 2, "retry_delay": 0}
    result = run(args, capsys)
    assert result["rc"] == 1
    assert result["probes"][0]["attempts"] == 3
    assert "probe '2+2': connection refused; gave up after 3 attempts" in result["msg"]


def test_refused_connection_while_listing_models(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = run({"url": url, "retries": 1, "retry_delay": 0}, capsys)
    assert result["rc"] == 1
    assert (
        result["msg"]
        == f"cannot list the models at {url}/v1/models: connection refused, gave up after 2 attempts"
    )


def test_models_listing_without_models(server: FakeSglang, capsys: pytest.CaptureFixture[str]) -> None:
    server.script("GET", MODELS, Reply(200, b'{"object": "list", "data": []}'))
    result = run({"url": server.url}, capsys)
    assert result["rc"] == 1
    assert "did not list any model; set the 'model' option" in result["msg"]
    assert server.count("POST", CHAT) == 0


# --- Arguments


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"url": "127.0.0.1:30000"}, "must start with http:// or https://"),
        ({"url": "http://127.0.0.1:1", "probes": []}, "'probes' is empty"),
        (
            {"url": "http://127.0.0.1:1", "probes": [{"name": "p", "prompt": "x", "expect": "("}]},
            "not a valid",
        ),
        ({"url": "http://127.0.0.1:1", "probes": [{"name": "p"}]}, "one of the following is required"),
        ({"url": "http://127.0.0.1:1", "concurrency": 0}, "concurrency must be 1 or more, not 0"),
    ],
)
def test_bad_arguments_fail_before_any_request(
    args: dict[str, Any], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(args, capsys)
    assert result["rc"] == 1
    assert words in result["msg"]


def test_documented_defaults_match_the_argument_spec() -> None:
    options = yaml.safe_load(MODULE.DOCUMENTATION)["options"]
    for name, spec in MODULE.ARGUMENT_SPEC.items():
        assert options[name]["type"] == spec["type"], name
        assert options[name].get("default") == spec.get("default"), name
        assert options[name].get("no_log", False) is False
    for name, spec in MODULE.PROBE_OPTIONS.items():
        documented = options["probes"]["suboptions"][name]
        assert documented["type"] == spec["type"], name
        assert documented.get("default") == spec.get("default"), name
    assert MODULE.ARGUMENT_SPEC["api_key"]["no_log"] is True
    assert sorted(MODULE.ARGUMENT_SPEC) == sorted(
        [
            "url",
            "api_key",
            "ca_path",
            "model",
            "probes",
            "timeout",
            "retries",
            "retry_delay",
            "logprobs",
            "journal_unit",
            "concurrency",
            "long_context_words",
            "mid_length_words",
            "prefix_reuse_words",
        ]
    )


# --- Journal

INVOCATION = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def fake_systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """systemctl and journalctl stand-ins first on PATH; each records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "journal.txt").write_text("")
    scripts = {
        "systemctl": f'echo "$@" > {tmp_path}/systemctl.args\n'
        f'printf "InvocationID={INVOCATION}\\nInactiveExitTimestamp=Sun 2026-11-29 21:15:30 UTC\\n'
        f'ActiveEnterTimestamp=Sun 2026-11-29 21:16:09 UTC\\nNRestarts=2\\n"\n',
        "journalctl": f'echo "$@" > {tmp_path}/journalctl.args\ncat {tmp_path}/journal.txt\n',
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return tmp_path


def test_journal_with_the_nan_crash_fails_even_when_answers_pass(
    server: FakeSglang, fake_systemd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (fake_systemd / "journal.txt").write_text(server_log())
    server.script("POST", CHAT, Reply.capture("healthy_chat_2plus2_greedy"))
    args = {"url": server.url, "model": "default", "probes": two_plus_two(), "logprobs": False}
    result = run({**args, "journal_unit": "sglang.service"}, capsys)

    assert result["rc"] == 1
    assert result["probes"][0]["passed"]
    journal = result["journal"]
    assert (journal["passed"], journal["restarts"], journal["scope"]) == (
        False,
        2,
        f"invocation {INVOCATION}",
    )
    assert any("probability tensor contains either" in finding for finding in journal["findings"])
    assert "journal: line " in result["msg"] and "NaN/Inf in the sampling probabilities" in result["msg"]
    assert (fake_systemd / "journalctl.args").read_text().split() == [
        "--no-pager",
        "-o",
        "short-iso",
        f"_SYSTEMD_INVOCATION_ID={INVOCATION}",
    ]
    assert (fake_systemd / "systemctl.args").read_text().split()[-2:] == ["--", "sglang.service"]


def test_clean_journal_passes(
    server: FakeSglang, fake_systemd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = server_log()
    (fake_systemd / "journal.txt").write_text(log[: log.index("Scheduler hit an exception")])
    server.script("POST", CHAT, Reply.capture("healthy_chat_2plus2_greedy"))
    args = {"url": server.url, "model": "default", "probes": two_plus_two(), "logprobs": False}
    result = run({**args, "journal_unit": "sglang.service"}, capsys)
    assert result["rc"] == 0, result.get("msg")
    assert result["journal"]["passed"] and result["journal"]["findings"] == []
    assert result["journal"]["lines"] > 40


def test_bad_unit_name_is_refused(
    server: FakeSglang, fake_systemd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.script("POST", CHAT, Reply.capture("healthy_chat_2plus2_greedy"))
    args = {"url": server.url, "model": "default", "probes": two_plus_two(), "logprobs": False}
    result = run({**args, "journal_unit": "--all"}, capsys)
    assert result["rc"] == 1
    assert "journal_unit '--all' is not a systemd unit name" in result["msg"]
    assert not (fake_systemd / "systemctl.args").exists()
