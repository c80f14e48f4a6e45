"""End-to-end smoke test of the lab engine: real sglang on the CPU serving the lab's tiny model.

Run through lab/bin/smoke-engine, which builds (or finds) the engine venv and the tiny model first.
For each variant (healthy, nan, inf) it starts ``python -m sglang.launch_server`` on 127.0.0.1, waits for
``/health_generate``, asks the probes of lab/model/probes.yml, checks the answers, then stops the server
with SIGTERM and checks that it exits cleanly and leaves no process behind. Every request's status and
raw body is printed (and written to ``--report`` as JSON). Exit status 0 only when every check passed.

- healthy: every probe's content and reasoning_content equal the trained answer exactly, the content
  matches the probe's ``expect`` / ``expect_python``, ``finish_reason`` is ``stop``; a logprobs request
  has finite logprobs; ``/metrics`` serves ``sglang:*`` metrics.
- nan / inf (``transformer.ln_f.weight`` poisoned): greedy decoding gives token 0 repeated (``!!!!``),
  ``finish_reason: length``, every logprob null, while ``/health_generate`` stays 200.

With ``--url`` it checks an already running server instead (one variant, no start or stop).
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

MODEL_NAME = "glm5-lab-tiny"
VARIANTS = ("healthy", "nan", "inf")
HOST = "127.0.0.1"
# The launch flags, spelled as `python -m sglang.launch_server --help` of sglang 0.5.23 spells them.
SERVER_FLAGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--cuda-graph-backend-decode",
    "disabled",
    "--cuda-graph-backend-prefill",
    "disabled",
    "--max-total-tokens",
    "2048",
    "--reasoning-parser",
    "glm45",
    "--sleep-on-idle",
    "--enable-metrics",
)
PYTHON_FENCE = re.compile(r"```python\n(.*?)```", re.DOTALL)


@dataclass
class Result:
    """One HTTP exchange, kept raw."""

    name: str
    method: str
    path: str
    status: int | None
    body: str
    seconds: float
    request: dict[str, Any] | None = None

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Run:
    """Everything one variant produced."""

    variant: str
    model: str
    results: list[Result] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None

    def check(self, what: str, ok: bool, detail: str = "") -> bool:
        self.checks.append((what, ok, detail))
        print(f"  [{'ok' if ok else 'FAIL'}] {what}{': ' + detail if detail else ''}", flush=True)
        return ok

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)


def http(base: str, name: str, method: str, path: str, body: dict[str, Any] | None, timeout: float) -> Result:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text = response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        status, text = None, f"{type(exc).__name__}: {exc}"
    return Result(name, method, path, status, text, round(time.monotonic() - started, 3), body)


def show(result: Result, limit: int) -> None:
    body = result.body if len(result.body) <= limit else result.body[:limit] + f"… ({len(result.body)} chars)"
    print(f"--- {result.name}: {result.method} {result.path} -> {result.status} in {result.seconds:.3f}s")
    if result.request is not None:
        print(f"    request: {json.dumps(result.request)}")
    print(f"    body: {body}", flush=True)


def chat_body(probe: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The request the inference check sends for a probe (sglang_inference_check's build_request)."""
    body: dict[str, Any] = {
        "model": "default",
        "messages": [{"role": "user", "content": probe["prompt"]}],
        "max_tokens": probe.get("max_tokens", 256),
        "temperature": probe.get("temperature", 0.0),
        "stream": False,
    }
    body.update(probe.get("extra_body", {}))
    body.update(extra)
    return body


def python_problem(content: str) -> str | None:
    """None when content holds a ```python block defining a typed function with a docstring."""
    blocks = PYTHON_FENCE.findall(content)
    if not blocks:
        return "no ```python block"
    try:
        tree = ast.parse(blocks[0])
    except SyntaxError as exc:
        return f"does not parse: {exc}"
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]
    if not functions:
        return "no function"
    function = functions[0]
    if function.returns is None or any(arg.annotation is None for arg in function.args.args):
        return "missing type hints"
    if not ast.get_docstring(function):
        return "no docstring"
    return None


def choice_of(result: Result) -> dict[str, Any]:
    try:
        return result.json()["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return {}


def check_healthy(run: Run, base: str, config: dict[str, Any], timeout: float, limit: int) -> None:
    answers = config["answers"]
    for probe in config["probes"]:
        result = http(base, probe["name"], "POST", "/v1/chat/completions", chat_body(probe), timeout)
        run.results.append(result)
        show(result, limit)
        choice = choice_of(result)
        message = choice.get("message", {})
        content, reasoning = message.get("content"), message.get("reasoning_content")
        answer = answers.get(probe["name"], {})
        name = probe["name"]
        run.check(f"{name}: HTTP 200", result.status == 200, str(result.status))
        run.check(
            f"{name}: finish_reason {probe.get('finish_reason', 'stop')}",
            choice.get("finish_reason") == probe.get("finish_reason", "stop"),
            str(choice.get("finish_reason")),
        )
        run.check(f"{name}: content is the trained answer", content == answer.get("content"), repr(content))
        run.check(
            f"{name}: reasoning_content is the trained reasoning",
            reasoning == answer.get("reasoning"),
            repr(reasoning),
        )
        if probe.get("expect"):
            run.check(
                f"{name}: content matches expect", re.search(probe["expect"], content or "") is not None
            )
        if probe.get("expect_python"):
            problem = python_problem(content or "")
            run.check(f"{name}: content is typed python with a docstring", problem is None, problem or "")

    probe = config["probes"][0]
    result = http(
        base, f"{probe['name']} logprobs", "POST", "/v1/chat/completions",
        chat_body(probe, logprobs=True, top_logprobs=1), timeout,
    )  # fmt: skip
    run.results.append(result)
    show(result, limit)
    logprobs = [
        item.get("logprob") for item in (choice_of(result).get("logprobs") or {}).get("content") or []
    ]
    run.check(
        "logprobs: all finite",
        bool(logprobs) and all(isinstance(lp, float) and math.isfinite(lp) for lp in logprobs),
        f"{len(logprobs)} tokens, min {min(logprobs, default=None)}",
    )
    for name, path in (("v1_models", "/v1/models"), ("metrics", "/metrics")):
        result = http(base, name, "GET", path, None, timeout)
        run.results.append(result)
        show(result, 300)
        run.check(f"GET {path}: 200", result.status == 200, str(result.status))
    run.check("metrics: sglang:* present", "sglang:" in run.results[-1].body)


def check_poisoned(run: Run, base: str, config: dict[str, Any], timeout: float, limit: int) -> None:
    probe = config["probes"][0]
    body = chat_body(probe, max_tokens=16, logprobs=True, top_logprobs=1)
    result = http(base, f"{probe['name']} greedy logprobs", "POST", "/v1/chat/completions", body, timeout)
    run.results.append(result)
    show(result, limit)
    choice = choice_of(result)
    message = choice.get("message", {})
    text = (message.get("reasoning_content") or "") + (message.get("content") or "")
    logprobs = [item.get("logprob") for item in (choice.get("logprobs") or {}).get("content") or []]
    run.check("HTTP 200 (the server does not notice)", result.status == 200, str(result.status))
    run.check("degenerate: token 0 repeated", bool(text) and set(text) == {"!"}, repr(text))
    run.check(
        "content does not match expect", re.search(probe["expect"], message.get("content") or "") is None
    )
    run.check(
        "finish_reason length", choice.get("finish_reason") == "length", str(choice.get("finish_reason"))
    )
    run.check("every logprob null", bool(logprobs) and all(lp is None for lp in logprobs), f"{len(logprobs)}")
    result = http(base, "health_generate after", "GET", "/health_generate", None, timeout)
    run.results.append(result)
    show(result, 200)
    run.check("/health_generate still 200", result.status == 200, str(result.status))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_healthy(run: Run, base: str, server: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if server is not None and server.poll() is not None:
            return run.check(
                "server healthy", False, f"exited with {server.returncode} before it was healthy"
            )
        result = http(base, "health_generate", "GET", "/health_generate", None, 30)
        if result.status == 200:
            run.timings["time_to_healthy_s"] = round(time.monotonic() - started, 1)
            run.results.append(result)
            return run.check("/health_generate 200", True, f"after {run.timings['time_to_healthy_s']} s")
        time.sleep(1)
    return run.check("server healthy", False, f"not healthy after {timeout} s")


def group_members(pgid: int) -> list[str]:
    """Live (non-zombie) processes of a process group, as "pid state command"."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        state, group = fields[0], int(fields[2])
        if group == pgid and state != "Z":
            members.append(f"{stat.parent.name} {state} {cmdline.strip()[:120]}")
    return members


def stop(run: Run, server: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, wait for a clean exit, then make sure nothing of the process group is left."""
    started = time.monotonic()
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    run.timings["stop_s"] = round(time.monotonic() - started, 1)
    run.exit_code = code
    run.check("SIGTERM: exit code 0", code == 0, f"{code} after {run.timings['stop_s']} s")
    # The server's children (scheduler, detokenizer) share its process group: give them a moment to go.
    deadline = time.monotonic() + 10
    while (leftover := group_members(server.pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    run.timings["group_gone_s"] = round(time.monotonic() - started, 1)
    run.check("no process left behind", not leftover, "; ".join(leftover))
    if leftover:
        os.killpg(server.pid, signal.SIGKILL)


def run_variant(variant: str, args: argparse.Namespace, config: dict[str, Any]) -> Run:
    suffix = "" if variant == "healthy" else f"-{variant}"
    model = args.models_dir / f"{MODEL_NAME}{suffix}"
    run = Run(variant, str(model))
    print(f"=== {variant}: {model}", flush=True)
    check = check_healthy if variant == "healthy" else check_poisoned
    if args.url:
        base = args.url.rstrip("/")
        if wait_healthy(run, base, None, args.start_timeout):
            check(run, base, config, args.request_timeout, args.body_chars)
        return run

    port = args.port or free_port()
    base = f"http://{HOST}:{port}"
    command = [args.python, "-m", "sglang.launch_server", "--model-path", str(model), "--host", HOST]
    command += ["--port", str(port), *SERVER_FLAGS]
    args.log_dir.mkdir(parents=True, exist_ok=True)
    log = args.log_dir / f"server-{variant}.log"
    print(f"  command: {' '.join(command)}\n  log: {log}", flush=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with log.open("wb") as out:
        server = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        if wait_healthy(run, base, server, args.start_timeout):
            check(run, base, config, args.request_timeout, args.body_chars)
        if server.poll() is None:
            stop(run, server, args.stop_timeout)
        else:
            run.check("server still running before SIGTERM", False, f"exit code {server.returncode}")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    if not run.passed:
        print(f"  server log tail:\n{tail(log)}", flush=True)
    return run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="the engine venv's python")
    parser.add_argument("--models-dir", type=Path, required=True, help="holds glm5-lab-tiny{,-nan,-inf}")
    parser.add_argument("--probes", type=Path, required=True, help="lab/model/probes.yml")
    parser.add_argument("--variants", default="healthy,nan", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--port", type=int, default=0, help="default: a free port on 127.0.0.1")
    parser.add_argument("--url", help="check this running server instead of starting one (one variant)")
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/glm5-smoke-engine"))
    parser.add_argument("--report", type=Path, help="write every result and check here as JSON")
    parser.add_argument("--start-timeout", type=float, default=300)
    parser.add_argument("--stop-timeout", type=float, default=60)
    parser.add_argument("--request-timeout", type=float, default=120)
    parser.add_argument("--body-chars", type=int, default=4000, help="print at most this much of a body")
    args = parser.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]
    if not args.variants or any(v not in VARIANTS for v in args.variants):
        parser.error(f"--variants: choose from {', '.join(VARIANTS)}")
    if args.url and len(args.variants) != 1:
        parser.error("--url checks one running server: give exactly one --variants")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = yaml.safe_load(args.probes.read_text(encoding="utf-8"))
    runs = [run_variant(variant, args, config) for variant in args.variants]
    if args.report:
        report = [
            {
                "variant": run.variant,
                "model": run.model,
                "passed": run.passed,
                "timings": run.timings,
                "exit_code": run.exit_code,
                "checks": [{"check": what, "ok": ok, "detail": detail} for what, ok, detail in run.checks],
                "results": [vars(result) for result in run.results],
            }
            for run in runs
        ]
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    failed = [run.variant for run in runs if not run.passed]
    summary = ", ".join(f"{run.variant} {'PASS' if run.passed else 'FAIL'} {run.timings}" for run in runs)
    print(f"smoke-engine: {'FAIL' if failed else 'PASS'} ({summary})", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
