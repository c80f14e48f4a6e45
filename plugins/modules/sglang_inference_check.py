#!/usr/bin/python
"""Ansible module: ask a running SGLang server real questions and judge the answers."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_inference_check
short_description: Ask an SGLang server real questions and fail on NaN, degenerate or wrong answers
description:
  - Sends chat-completion probes to an SGLang server and judges what the model actually answers.
    A green C(/health) proves nothing. A NaN-poisoned model keeps C(/health) at 200 while it answers
    C(!!!!) (token 0 repeated) with C(finish_reason=length) (sglang#36716).
  - A probe fails on an HTTP status other than 200; a body that is not a chat completion; a
    C(finish_reason) other than the required one; null or empty content, including answers that stayed in
    C(reasoning_content); degenerate output in content or reasoning; a null, NaN, Inf or positive logprob,
    or logprobs that do not cover the generated tokens (C(usage.completion_tokens)); an C(expect) or
    C(expect_python) that is not met; an error body carrying a NaN or assert signature; an answer not
    complete within I(timeout).
  - An HTTP 401 or 403 is reported as a key problem (the server refused the API key), never with the key.
  - Any failed probe fails the task, with a message naming the probe and the symptom. The per-probe results
    are returned either way.
  - Only a refused connection or an HTTP 503 is retried. A bad answer is never retried.
  - Read-only. It runs in check mode too.
  - The judging logic lives in the C(judge_verdict) module_utils, where the thresholds are documented; the
    probes and the HTTP side are in C(judge_probes), the journal reading in C(judge_journal).
author:
  - glm5-deploy maintainers (@glm5-deploy)
options:
  url:
    description:
      - Base URL of the server, without a path, for example C(http://127.0.0.1:30000).
    type: str
    required: true
  api_key:
    description:
      - Sent as a Bearer token in the C(Authorization) header. Needed when sglang runs with C(--api-key).
    type: str
  ca_path:
    description:
      - CA certificate(s) (PEM file on the host) to verify an C(https://) server against.
      - Default the system's CAs.
    type: path
  model:
    description:
      - Model name for the requests.
      - Defaults to the first id listed by C(GET /v1/models).
    type: str
  probes:
    description:
      - The questions to ask. Names must be unique.
      - Defaults to the seeds' two probes. C(2+2) asks "What is 2+2? Answer briefly." and expects content
        whose only number is 4. C(prime) asks "Write a Python function that checks if a number is prime.
        Include docstring and type hints." with I(expect_python=true).
    type: list
    elements: dict
    suboptions:
      name:
        description: Name of the probe, used in messages and results.
        type: str
        required: true
      prompt:
        description:
          - The user message. Mutually exclusive with I(messages). One of the two is required.
        type: str
      messages:
        description:
          - A whole chat, as a list of C({role, content}) dicts. Mutually exclusive with I(prompt).
        type: list
        elements: dict
      max_tokens:
        description:
          - Token cap for the answer. GLM-5 thinks first, so it must leave room for the reasoning. A cap
            inside the thinking gives empty content and C(finish_reason=length), which fails.
        type: int
        default: 4096
      expect:
        description:
          - A regular expression that the final content must match (C(re.search); anchor it yourself).
        type: str
      expect_python:
        description:
          - The content must hold a C(```python) code block that parses and defines a function with type hints
            on its arguments and return value and a docstring. The code is parsed, never run.
        type: bool
        default: false
      finish_reason:
        description: The C(finish_reason) the answer must have.
        type: str
        default: stop
        choices: [stop, length, tool_calls, content_filter, function_call, abort]
      temperature:
        description: Sampling temperature. 0 is greedy and repeatable.
        type: float
        default: 0.0
      extra_body:
        description:
          - "A dict merged into the request body, for example
            C({chat_template_kwargs: {enable_thinking: false}})."
          - It may not set C(model), C(messages), C(max_tokens), C(temperature), C(logprobs), C(stream)
            or C(n).
        type: dict
  timeout:
    description:
      - Seconds each request may take in all, from sending it to the last byte of the answer. This is a total
        deadline, enforced while the answer is read, not an idle timeout, so a server that trickles bytes
        cannot hold the task. The failure says which probe, how many bytes arrived and after how long.
      - sglang sends a non-streamed answer once it is generated, so this is also the time the model has to
        think and answer.
    type: int
    default: 300
  retries:
    description:
      - How many more times to try a request that met a refused connection or an HTTP 503.
    type: int
    default: 3
  retry_delay:
    description: Seconds between those tries.
    type: int
    default: 5
  logprobs:
    description:
      - Request logprobs and fail on any null, NaN, Inf or positive logprob (sglang sends NaN as null); the
        failure names the first bad value and its token.
      - With C(true), an answer whose logprobs are missing or do not hold one entry per generated token
        (C(usage.completion_tokens)) fails too.
    type: bool
    default: true
  journal_unit:
    description:
      - A systemd unit to scan, with C(journalctl), since its last start (its current invocation) for
        NaN and crash signatures (C(probability tensor contains either), C(NaN detected),
        C(device-side assert), C(CUDA error), sglang processes that C(hit an exception), Python tracebacks,
        C(SIGQUIT received)). Any finding fails the task.
      - Reading another unit's journal needs root or the C(systemd-journal) group, so use C(become).
    type: str
  concurrency:
    description:
      - Send each probe this many times at once, and judge every answer; the probe fails if any answer fails.
      - Reaches the kernels that only break under a batch of concurrent requests (SM120's CUTLASS FP4 race,
        flashinfer#2708), which single requests never do. 64 on a GPU fleet; the lab uses a few.
    type: int
    default: 1
  long_context_words:
    description:
      - Add the long-context probe (module_utils/long_context.py) over this many words of generated filler,
        one fact planted in the middle and asked for at the end; judged like the others. It is sent once, not
        C(concurrency) times (64 copies of a 6000-token prompt would fill the KV cache). 0 adds none.
      - Longer than DeepSeek Sparse Attention's top-k (2048 tokens), so the sparse selection runs; both seed
        probes are far shorter. 4500 words (about 6000 tokens) on a GPU fleet; the lab's tiny model, with its
        1024-token context, uses a few hundred.
    type: int
    default: 0
  mid_length_words:
    description:
      - Add the mid-length probe (module_utils/long_context.py) over this many words, a recall question like
        the long-context one, sized between the short probes and the long one (a GPU fleet uses 600 words,
        about 800 tokens). Sent I(concurrency) times at once and judged like the others. 0 adds none.
      - A prefill of more than 64 rows runs another kernel path than the short
        probes' (sglang pull request 39288).
    type: int
    default: 0
  prefix_reuse_words:
    description:
      - Add the prefix-reuse probe (module_utils/long_context.py) over this many words, one recall prompt sent
        twice, one after the other, so that the second is served from the radix cache's copy of the first
        one's prefix (on a server checked before, the first may come from the cache too; the follow-up always
        does). Both answers are judged, and the follow-up must agree with the first (the same words).
        A follow-up that fails, or answers otherwise, fails with its own symptom (C(the follow-up on the
        cached prefix ...)). 0 adds none.
      - Reaches the bug family "first request correct, follow-ups that reuse the cached prefix garbage"
        (sglang pull requests 18904 and 24198), which no single request does. 2000 words (about 2600
        tokens, past DSA's top-k) on a GPU fleet.
    type: int
    default: 0
extends_documentation_fragment:
  - glm5.deploy.attributes.read_only
attributes:
  platform:
    description: Any POSIX host.
    support: full
    platforms: posix
notes:
  - "Degenerate output: a run of 8 or more identical non-whitespace characters (C(!!!!!!!!)) fails.
    Rule and digit characters (C(- = _ * # ~ . ` + | / \\ < >), digits) fail only when the run is at least
    half the text, so a docstring's C(----------) passes. A unit of 2 to 16 characters repeated at least 8
    times back to back fails when it is at least half the text, or anywhere when it repeats 32 times.
    Whitespace never counts."
  - Runs on the target host with the standard library only (C(ansible.module_utils.urls)).
"""

EXAMPLES = r"""
- name: Check that the model answers the default probes correctly.
  glm5.deploy.sglang_inference_check:
    url: "http://127.0.0.1:30000"
    api_key: "{{ sglang_api_key }}"
    journal_unit: sglang.service
  become: true

- name: Check a server whose thinking is switched off, with a probe of our own.
  glm5.deploy.sglang_inference_check:
    url: "http://{{ inventory_hostname }}:30000"
    model: default
    logprobs: false
    probes:
      - name: hello
        prompt: Say hello.
        max_tokens: 64
        expect: "(?i)hello"
        extra_body:
          chat_template_kwargs:
            enable_thinking: false
  register: inference
"""

RETURN = r"""
passed:
  description: Whether every probe and the journal scan passed.
  returned: always
  type: bool
  sample: false
url:
  description: The base URL that was checked.
  returned: always
  type: str
  sample: http://127.0.0.1:30000
model:
  description: The model name the requests used.
  returned: when the model is known
  type: str
  sample: /srv/models/GLM-5-NVFP4
probes:
  description: One result per probe, in order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The probe's name.
      type: str
      sample: "2+2"
    passed:
      description: Whether the answer passed.
      type: bool
      sample: false
    failures:
      description: What was wrong, in plain words. Empty when the probe passed.
      type: list
      elements: str
      sample:
        - "degenerate output '!!!!!!!!!!!!!!!!' ('!' repeated 16 times) in reasoning_content,
          the silent-NaN symptom"
        - "finish_reason 'length' (wanted 'stop'): the answer hit max_tokens=4096"
    finish_reason:
      description: The answer's finish_reason, or null.
      type: str
      sample: stop
    matched_stop:
      description: The stop token id or string that ended the answer, or null.
      type: raw
      sample: 151336
    content:
      description: The final content (at most 2000 characters), or null.
      type: str
      sample: "4"
    reasoning_content:
      description: The reasoning, cut to 400 characters (head and tail), or null.
      type: str
      sample: "2+2 is 4."
    completion_tokens:
      description: Tokens generated, from the answer's usage, or null.
      type: int
      sample: 10
    failure_kind:
      description:
        - What kind of failure, for the removal policy of the validate gate and the guard (module_utils
          C(judge_verdict)); null when the probe passed.
        - C(degenerate) the silent-NaN symptoms (degenerate output, a null, NaN, Inf or positive logprob,
          a crash signature in an error answer); C(broken) no answer that can be judged (HTTP or transport
          error, not a chat completion); C(wrong) a sound answer that misses the probe's expect,
          expect_python, finish_reason, or has empty content (what a typo in a probe can cause).
      type: str
      sample: degenerate
    degenerate:
      description: Whether the failure kind is C(degenerate) (never the fault of the probe).
      type: bool
      sample: true
    latency_s:
      description: Seconds the last attempt took.
      type: float
      sample: 0.908
    attempts:
      description: How many times the request was sent (more than 1 only after refused connections or 503).
      type: int
      sample: 1
    answers:
      description: How many copies of the probe were sent (at once, or one after the other for prefix-reuse).
      returned: when concurrency is more than 1, and for the prefix-reuse probe
      type: int
      sample: 64
    failed_answers:
      description: How many of those answers failed.
      returned: when concurrency is more than 1, and for the prefix-reuse probe
      type: int
      sample: 0
    follow_up_content:
      description: The prefix-reuse probe's second answer (at most 2000 characters), or null.
      returned: for the prefix-reuse probe
      type: str
      sample: heliotrope
journal:
  description: The journal scan, when I(journal_unit) is set.
  returned: when journal_unit is set
  type: dict
  contains:
    unit:
      description: The unit scanned.
      type: str
    scope:
      description: Which part of the journal was read (the invocation id, or the start time).
      type: str
    lines:
      description: Lines read.
      type: int
    restarts:
      description: The unit's NRestarts, when systemd reports it.
      type: int
    findings:
      description: Matching lines, as C(line N, meaning, excerpt).
      type: list
      elements: str
    error:
      description: Why the journal could not be read, or null.
      type: str
    passed:
      description: Whether the journal was read and had no findings.
      type: bool
changed:
  description: Always false; the check only reads.
  returned: always
  type: bool
  sample: false
"""

import json
import threading
import time
import urllib.error
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.glm5.deploy.plugins.module_utils.judge_journal import (
    check_unit_name,
    journal_command,
    journal_read_problem,
    scan_journal,
)
from ansible_collections.glm5.deploy.plugins.module_utils.judge_probes import (
    DEFAULT_FINISH_REASON,
    DEFAULT_MAX_TOKENS,
    DEFAULT_PROBES,
    DEFAULT_RETRIES,
    DEFAULT_RETRY_DELAY,
    DEFAULT_TEMPERATURE,
    DEFAULT_TIMEOUT,
    FINISH_REASONS,
    Probe,
    ProbeError,
    build_request,
    deadline_problem,
    describe_exception,
    first_model_id,
    is_retryable_status,
    is_timeout,
    normalize_probes,
    read_answer,
)
from ansible_collections.glm5.deploy.plugins.module_utils.judge_verdict import (
    CONTENT_KEEP,
    Verdict,
    combine_answers,
    failure_message,
    judge_follow_up,
    judge_response,
    judge_transport_error,
    truncate,
)
from ansible_collections.glm5.deploy.plugins.module_utils.long_context import NAME as LONG_CONTEXT
from ansible_collections.glm5.deploy.plugins.module_utils.long_context import (
    PREFIX_REUSE,
    LongContextError,
    with_recall_probes,
)
from ansible_collections.glm5.deploy.plugins.module_utils.systemd_unit import parse_systemctl_show

PROBE_OPTIONS: dict[str, Any] = {
    "name": {"type": "str", "required": True},
    "prompt": {"type": "str"},
    "messages": {"type": "list", "elements": "dict"},
    # A count of tokens, not a secret (its name has "token" in it).
    "max_tokens": {"type": "int", "default": DEFAULT_MAX_TOKENS, "no_log": False},
    "expect": {"type": "str"},
    "expect_python": {"type": "bool", "default": False},
    "finish_reason": {"type": "str", "default": DEFAULT_FINISH_REASON, "choices": list(FINISH_REASONS)},
    "temperature": {"type": "float", "default": DEFAULT_TEMPERATURE},
    "extra_body": {"type": "dict"},
}

ARGUMENT_SPEC: dict[str, Any] = {
    "url": {"type": "str", "required": True},
    "api_key": {"type": "str", "no_log": True},
    "ca_path": {"type": "path"},
    "model": {"type": "str"},
    "probes": {
        "type": "list",
        "elements": "dict",
        "options": PROBE_OPTIONS,
        "mutually_exclusive": [["prompt", "messages"]],
        "required_one_of": [["prompt", "messages"]],
    },
    "timeout": {"type": "int", "default": DEFAULT_TIMEOUT},
    "retries": {"type": "int", "default": DEFAULT_RETRIES},
    "retry_delay": {"type": "int", "default": DEFAULT_RETRY_DELAY},
    "logprobs": {"type": "bool", "default": True},
    "journal_unit": {"type": "str"},
    "concurrency": {"type": "int", "default": 1},
    "long_context_words": {"type": "int", "default": 0},
    "mid_length_words": {"type": "int", "default": 0},
    "prefix_reuse_words": {"type": "int", "default": 0},
}


class Exchange:
    """The outcome of one request, after retries: a status and body, or a transport error."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.body: bytes = b""
        self.received = 0
        self.error: str | None = None
        self.retryable = False
        self.timed_out = False
        self.attempts = 0
        self.latency_s = 0.0


def _read_body(stream: Any, result: Exchange, stop: threading.Event) -> None:
    """Read the body into ``result``, counting the bytes as they arrive, until its end or until ``stop``."""

    def count(size: int) -> None:
        result.received += size

    result.body = read_answer(getattr(stream, "read1", None) or stream.read, stop.is_set, count)


def _exchange(
    method: str,
    url: str,
    data: bytes | None,
    headers: dict[str, str],
    timeout: int,
    result: Exchange,
    stop: threading.Event,
    ca_path: str | None = None,
) -> None:
    """One request into ``result``. Runs in a worker thread; :func:`_send_once` watches the clock."""
    try:
        response = open_url(
            url,
            data=data,
            headers=headers,
            method=method,
            timeout=timeout,
            follow_redirects="none",
            ca_path=ca_path,
        )
        try:
            result.status = int(response.getcode())
            _read_body(response, result, stop)
        finally:
            response.close()
    except urllib.error.HTTPError as exc:
        result.status = int(exc.code)
        result.retryable = is_retryable_status(result.status)
        try:
            _read_body(exc, result, stop)
        except Exception as inner:  # an error body that cannot be read is judged as empty
            result.timed_out = is_timeout(inner)
    except Exception as exc:  # every transport problem becomes a reason, never a traceback
        result.timed_out = is_timeout(exc)
        result.error, result.retryable = describe_exception(exc)


def _send_once(
    method: str,
    url: str,
    data: bytes | None,
    headers: dict[str, str],
    timeout: int,
    ca_path: str | None = None,
) -> Exchange:
    """One request with a total deadline of ``timeout`` seconds, from sending it to the last byte of the body.

    The request runs in a daemon thread, read in chunks; this thread waits for it at most ``timeout`` seconds.
    A socket timeout alone would not do: a server that sends a byte every few seconds never trips it. At the
    deadline the worker is told to stop and left behind; it ends at its next read or with the process.
    """
    result = Exchange()
    stop = threading.Event()
    worker = threading.Thread(
        target=_exchange, args=(method, url, data, headers, timeout, result, stop, ca_path), daemon=True
    )
    started = time.monotonic()
    worker.start()
    worker.join(max(timeout, 0))
    if worker.is_alive() or result.timed_out:
        stop.set()
        late = Exchange()
        late.error = deadline_problem(timeout, time.monotonic() - started, result.status, result.received)
        return late
    return result


def send(
    method: str, url: str, payload: dict[str, Any] | None, headers: dict[str, str], params: dict[str, Any]
) -> Exchange:
    """Send a request, retrying only on a refused connection or a 503, at most ``retries`` more times."""
    data = json.dumps(payload).encode("utf-8") if payload is not None else None
    attempts = 0
    while True:
        attempts += 1
        started = time.monotonic()
        result = _send_once(method, url, data, headers, params["timeout"], params.get("ca_path"))
        result.latency_s = round(time.monotonic() - started, 3)
        result.attempts = attempts
        if not result.retryable or attempts > max(params["retries"], 0):
            return result
        time.sleep(max(params["retry_delay"], 0))


def _gave_up(result: Exchange) -> str:
    return f"gave up after {result.attempts} attempts" if result.attempts > 1 else ""


def scan_unit(module: AnsibleModule, unit: str) -> dict[str, Any]:
    """Read the unit's journal since its last start and look for NaN and crash signatures."""
    journal: dict[str, Any] = {"unit": unit, "scope": None, "lines": 0, "restarts": None, "findings": []}
    journal["error"] = check_unit_name(unit)
    systemctl = module.get_bin_path("systemctl")
    journalctl = module.get_bin_path("journalctl")
    if journal["error"] is None and (systemctl is None or journalctl is None):
        journal["error"] = "systemctl or journalctl is not installed on the host"
    if journal["error"] is None:
        properties = ["InvocationID", "InactiveExitTimestamp", "ActiveEnterTimestamp", "NRestarts"]
        command = [systemctl, "show", *(f"--property={name}" for name in properties), "--", unit]
        rc, out, err = module.run_command(command)
        props = parse_systemctl_show(out)
        restarts = props.get("NRestarts", "")
        journal["restarts"] = int(restarts) if restarts.isascii() and restarts.isdigit() else None
        args, journal["scope"] = journal_command(unit, props)
        if rc != 0:
            journal["error"] = f"systemctl show {unit} failed (rc={rc}): {err.strip()[:200]}"
        elif args is None:
            journal["error"] = f"{unit}: {journal['scope']}"
        else:
            rc, out, err = module.run_command([journalctl, *args[1:]])
            journal["error"] = journal_read_problem(rc, err)
            journal["lines"] = len(out.splitlines())
            journal["findings"] = scan_journal(out)
    journal["passed"] = journal["error"] is None and not journal["findings"]
    return journal


def judge_answer(answer: Exchange, probe: Probe, logprobs: bool) -> Verdict:
    """The verdict on one exchange: its transport error, or the judged answer; a retried request that gave
    up says so."""
    if answer.error is not None:
        verdict = judge_transport_error(answer.error)
    else:
        verdict = judge_response(answer.status, answer.body, probe, logprobs_requested=logprobs)
    if not verdict.passed and answer.retryable and _gave_up(answer):
        verdict.failures.append(_gave_up(answer))
    return verdict


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    url = params["url"].strip().rstrip("/")
    result: dict[str, Any] = {"changed": False, "passed": False, "url": url, "probes": []}

    try:
        given = params["probes"] if params["probes"] is not None else [dict(item) for item in DEFAULT_PROBES]
        if given:
            given = with_recall_probes(
                given,
                long_context_words=params["long_context_words"],
                mid_length_words=params["mid_length_words"],
                prefix_reuse_words=params["prefix_reuse_words"],
            )
        probes = normalize_probes(given)
    except (ProbeError, LongContextError) as exc:
        module.fail_json(msg=str(exc), **result)
    if not url.startswith(("http://", "https://")):
        module.fail_json(msg=f"url {url!r} must start with http:// or https://", **result)
    if params["concurrency"] < 1:
        module.fail_json(msg=f"concurrency must be 1 or more, not {params['concurrency']}", **result)

    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if params["api_key"]:
        headers["Authorization"] = f"Bearer {params['api_key']}"

    model = params["model"]
    if not model:
        listing = send("GET", f"{url}/v1/models", None, headers, params)
        if listing.error is not None:
            reason = ", ".join(item for item in (listing.error, _gave_up(listing)) if item)
            module.fail_json(msg=f"cannot list the models at {url}/v1/models: {reason}", **result)
        model, problem = first_model_id(listing.status, listing.body)
        if problem is not None:
            module.fail_json(msg=f"{url}: {problem}", **result)
    result["model"] = model

    chat = f"{url}/v1/chat/completions"
    for probe in probes:
        request = build_request(probe, model, params["logprobs"])
        extra: dict[str, Any] = {}
        if probe.name == PREFIX_REUSE:
            # The prefix-reuse probe: the same request twice, one after the other; the second is served from
            # the radix cache's copy of the first one's prefix, and must agree with it.
            answers = [send("POST", chat, request, headers, params)]
            answers.append(send("POST", chat, request, headers, params))
            first, follow_up = (judge_answer(answer, probe, params["logprobs"]) for answer in answers)
            verdict, failed_answers = judge_follow_up(first, follow_up)
            extra.update(answers=2, failed_answers=failed_answers)
            extra["follow_up_content"] = truncate(follow_up.content, CONTENT_KEEP)
        else:
            # The concurrency probe: the same request N times at once, so that kernels that only fail under
            # a batch (SM120's CUTLASS FP4 race) are reached; every answer is judged. Long-context: once.
            copies = 1 if probe.name == LONG_CONTEXT else params["concurrency"]
            with ThreadPoolExecutor(max_workers=copies) as pool:
                sent = [pool.submit(send, "POST", chat, request, headers, params) for _copy in range(copies)]
                answers = [future.result() for future in sent]
            verdicts = [judge_answer(answer, probe, params["logprobs"]) for answer in answers]
            verdict, failed_answers = combine_answers(verdicts)
            if copies > 1:
                extra.update(answers=len(answers), failed_answers=failed_answers)
        entry = {
            "name": probe.name,
            **verdict.to_dict(),
            **verdict.classification(),
            "latency_s": max(answer.latency_s for answer in answers),
            "attempts": max(answer.attempts for answer in answers),
            **extra,
        }
        result["probes"].append(entry)

    journal_failures: list[str] = []
    if params["journal_unit"]:
        journal = scan_unit(module, params["journal_unit"])
        result["journal"] = journal
        journal_failures = [journal["error"]] if journal["error"] else list(journal["findings"])

    result["passed"] = all(item["passed"] for item in result["probes"]) and not journal_failures
    if not result["passed"]:
        module.fail_json(msg=failure_message(url, model, result["probes"], journal_failures), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
