"""lab/bin/loadgen against a real loopback server that answers with the recorded sglang replies: every answer
is judged, and --rate paces the requests (molecule/rolling and the guard's test send ten a second)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from chat_server import JsonHandler, serving
from chat_server import no_proxy as no_proxy  # the autouse fixture: no proxy in this file
from sglang_captures import load

LOADGEN = Path(__file__).resolve().parents[2] / "lab" / "bin" / "loadgen"
MODELS = load("healthy_v1_models").body
FOUR = load("healthy_chat_2plus2_greedy").body
GARBAGE = load("nan_lnf__chat_greedy").body


def router(chat: bytes) -> type[JsonHandler]:
    """A router with two healthy workers whose chat completions all answer ``chat``."""

    class Handler(JsonHandler):
        def answer(self, method: str, headers: dict[str, str], body: Any) -> None:
            if self.path == "/v1/models":
                self.reply(200, MODELS)
            elif self.path == "/workers":
                workers = [{"url": f"http://w{n}", "is_healthy": True} for n in (1, 2)]
                self.reply(200, json.dumps({"workers": workers}).encode())
            else:
                self.reply(200, chat)

    return Handler


def loadgen(url: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    argv = [sys.executable, str(LOADGEN), "--url", url, "--out", str(out), "--concurrency", "1", *args]
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.read_text())


@pytest.mark.timing
def test_rate_paces_the_requests(tmp_path: Path) -> None:
    with serving(router(FOUR)) as url:
        paced = loadgen(url, tmp_path, "--rate", "10", "--max-seconds", "1.5")
        unpaced = loadgen(url, tmp_path, "--max-seconds", "1.5")
    # Request n leaves (n - 1) / 10 s after the start: at most 16 fit in 1.5 s, however fast the server is
    # (fewer on a busy machine); back to back, a loopback server answers many more.
    assert 1 <= paced["requests"] <= 16, paced
    assert unpaced["requests"] > 16, unpaced
    assert paced["failed"] == unpaced["failed"] == 0
    assert paced["min_healthy_workers"] == 2
    # Every answered request is counted in the second it ended.
    assert sum(paced["completed_per_s"]) == paced["requests"] and len(paced["completed_per_s"]) <= 3


def test_max_requests_ends_a_paced_run_and_wrong_answers_are_failures(tmp_path: Path) -> None:
    with serving(router(GARBAGE)) as url:
        report = loadgen(url, tmp_path, "--rate", "20", "--max-requests", "5")
    assert report["requests"] == report["failed"] == report["wrong_answers"] == 5, report
    assert report["failed_requests"] == 0 and len(report["wrong_at_s"]) == 5, report
    assert report["seconds"] < 5, report
