"""playbooks/validate.yml run by the real ansible-playbook on the controller (local connection, no lab),
against fake replicas and a fake router on 127.0.0.1: the validate gate routes by the removal policy the guard
uses too. A NaN node beside a healthy one goes out and is named; other failures are capped; a probe that every
replica fails with sound answers (an operator's typo) fails the run naming the probe and leaves the router as
it was."""

from __future__ import annotations

import json
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from chat_server import JsonHandler, serving
from chat_server import no_proxy as no_proxy  # the autouse fixture: no proxy in this file
from controller_play import ROOT, ansible_playbook
from sglang_captures import load

ADMIN_KEY = "adm-gate-test-0123456789"
FOUR = {"name": "2+2", "prompt": "What is 2+2? Answer briefly.", "max_tokens": 256}


class Router:
    """smg's admin API (GET/POST /workers, DELETE /workers/{id}), and a healthy chat answer for the router
    play."""

    def __init__(self) -> None:
        self.workers: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.lock = threading.Lock()

    def register(self, url: str) -> None:
        worker_id = str(uuid.uuid4())
        self.workers[worker_id] = {"id": worker_id, "url": url, "is_healthy": True, "status": "ready"}

    def registered(self) -> set[str]:
        return {w["url"] for w in self.workers.values() if w["status"] != "draining"}

    def handler(self) -> type[JsonHandler]:
        router = self

        class Handler(JsonHandler):
            def answer(self, method: str, headers: dict[str, str], body: Any) -> None:
                if self.path.startswith("/v1/"):
                    replica(self, "healthy", method)
                    return
                if headers.get("Authorization") != f"Bearer {ADMIN_KEY}":
                    self.reply(401, b'{"error": "Unauthorized"}')
                    return
                with router.lock:
                    if method == "GET" and self.path == "/workers":
                        listed = list(router.workers.values())
                        self.reply(200, json.dumps({"workers": listed, "total": len(listed)}).encode())
                        for worker_id in [w["id"] for w in listed if w["status"] == "draining"]:
                            del router.workers[worker_id]
                    elif method == "POST" and self.path == "/workers":
                        router.register(body["url"])
                        self.reply(202, b'{"status": "accepted"}')
                    elif method == "DELETE" and self.path.startswith("/workers/"):
                        worker = router.workers[self.path.rsplit("/", 1)[1]]
                        worker["status"] = "draining"
                        router.deleted.append(worker["url"])
                        self.reply(202, b'{"status": "accepted"}')
                    else:
                        self.reply(404, b'{"detail": "Not Found"}')

            def do_DELETE(self) -> None:
                self._serve("DELETE")

        return Handler


def replica(handler: JsonHandler, mode: str, method: str) -> None:
    """A replica's answer: healthy, NaN-poisoned, or an HTTP 500 (broken: not degenerate)."""
    if method == "GET" and handler.path == "/v1/models":
        handler.reply(200, load("healthy_v1_models").body)
    elif mode == "error":
        handler.reply(500, b'{"object": "error", "message": "Internal server error"}')
    elif mode == "nan":
        handler.reply(200, load("nan_lnf__chat_greedy_logprobs").body)
    else:
        handler.reply(200, load("healthy_chat_2plus2_logprobs").body)


def node_handler(mode: str) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def answer(self, method: str, headers: dict[str, str], body: Any) -> None:
            replica(self, mode, method)

    return Handler


def port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def validate(
    tmp_path: Path, modes: dict[str, str], probes: list[dict[str, Any]], **extra: Any
) -> tuple[Any, Router, dict[str, str]]:
    """validate.yml over one node per mode (all registered in the router first); returns the run, the router
    and each node's URL."""
    router = Router()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    with ExitStack() as stack:
        urls = {host: stack.enter_context(serving(node_handler(mode))) for host, mode in modes.items()}
        router_url = stack.enter_context(serving(router.handler()))
        for url in urls.values():
            router.register(url)
        nodes = {
            host: local
            | {
                "sglang_server_advertise_host": "127.0.0.1",
                "sglang_server_port": port(url),
                "sglang_validate_probes": probes,
                "sglang_validate_journal_unit": "",
                "sglang_validate_concurrency": 1,
                "sglang_validate_long_context_words": 0,
                "sglang_validate_mid_length_words": 0,
                "sglang_validate_prefix_reuse_words": 0,
                "sglang_validate_retries": 0,
                "sglang_validate_timeout": 30,
                **extra,
            }
            for host, url in urls.items()
        }
        gateway = local | {
            "sglang_router_port": port(router_url),
            "sglang_router_admin_key": ADMIN_KEY,
            "sglang_router_hold_dir": str(tmp_path / "holds"),
            "sglang_validate_probes": probes,
        }
        inventory = {
            "all": {
                "children": {
                    "sglang_nodes": {"hosts": nodes},
                    "sglang_router": {"hosts": {"gw": gateway}},
                }
            }
        }
        (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
        done = ansible_playbook("-i", str(tmp_path / "hosts.yml"), str(ROOT / "playbooks" / "validate.yml"))
    return done, router, urls


def fatal(out: str, host: str) -> str:
    """The failure message of ``host`` in an ansible-playbook run's output (JSON results), or ""."""
    marker = f"fatal: [{host}]: FAILED! => "
    if marker not in out:
        return ""
    result, _ = json.JSONDecoder().raw_decode(out[out.index(marker) + len(marker) :])
    return str(result.get("msg", ""))


def summary_rows(out: str) -> dict[str, str]:
    """The fleet summary's rows by host, from the debug task's output."""
    start = out.index("=> ", out.index("TASK [Summarize the fleet]")) + 3
    result, _ = json.JSONDecoder().raw_decode(out[start:])
    return {line.split()[0]: line for line in result["msg"][1:]}


@pytest.fixture(autouse=True)
def json_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")


@pytest.fixture
def gate_run(tmp_path: Path, json_results: None) -> Iterator[tuple[Any, Router, dict[str, str]]]:
    modes = {"n1": "healthy", "n2": "nan", "n3": "error", "n4": "error", "n5": "error"}
    yield validate(tmp_path, modes, [FOUR], sglang_validate_max_removal_fraction=0.25)


def test_a_nan_node_goes_out_and_other_failures_are_capped(
    gate_run: tuple[Any, Router, dict[str, str]],
) -> None:
    done, router, urls = gate_run
    out = done.stdout
    assert done.returncode == 2, out[-3000:] + done.stderr[-2000:]
    # n2 answers NaN: out whatever the cap. Of the three HTTP 500s, the cap (25% of 5 replicas: 1) takes one.
    assert router.deleted[0] == urls["n2"] or urls["n2"] in router.deleted
    assert sorted(router.deleted) == sorted([urls["n2"], urls["n3"]])
    assert router.registered() == {urls["n1"], urls["n4"], urls["n5"]}
    assert fatal(out, "n1") == ""
    assert "Out of the router." in fatal(out, "n2") and "degenerate output" in fatal(out, "n2")
    assert "Out of the router." in fatal(out, "n3")
    for host in ("n4", "n5"):
        assert "Not taken out of the router: the removal cap" in fatal(out, host), fatal(out, host)
    rows = summary_rows(out)
    assert rows["n1"].split()[-1] == "in"
    assert "out of the router: " in rows["n2"] and "out of the router: " in rows["n3"]
    assert "not taken out (the removal cap (sglang_validate_max_removal_fraction) holds it in)" in rows["n4"]


def test_a_typo_in_a_probe_fails_the_run_naming_it_and_leaves_the_router_alone(tmp_path: Path) -> None:
    typo = FOUR | {"expect": "^five$"}
    done, router, urls = validate(tmp_path, {"n1": "healthy", "n2": "healthy", "n3": "healthy"}, [typo])
    out = done.stdout
    assert done.returncode == 2, out[-3000:] + done.stderr[-2000:]
    assert router.deleted == [] and router.registered() == set(urls.values())
    for host in urls:
        message = fatal(out, host)
        assert "Suspect probe '2+2': every replica judged failed it with otherwise sound answers" in message
        assert "Not taken out of the router: every replica judged failed probe '2+2'" in message
        assert "No replica checked in this run passed." in message
    assert "the probe is suspect, not it" in summary_rows(out)["n1"]
