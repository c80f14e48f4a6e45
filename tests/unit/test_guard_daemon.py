"""The content guard daemon against a real HTTP server on 127.0.0.1 that plays the router and the replicas.

The replicas serve the real sglang 0.5.23 answers of tests/fixtures/sglang-responses/ (copies of
tests/fixtures/sglang-responses/), healthy or NaN-poisoned; the router speaks smg's admin API
(GET/POST /workers, DELETE /workers/{id}). The daemon's cycle runs in this process. Only loopback addresses
are used. The Prometheus tests need prometheus_client (installed in the guard's own venv, not in .venv):
without it they are skipped, and say so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import ansible_collections.glm5.deploy.plugins.module_utils.judge_probes as module_probes
import ansible_collections.glm5.deploy.plugins.module_utils.judge_verdict as module_verdict
import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from chat_server import HELLO, TRICKLE_BODY, JsonHandler, free_port, prime_with_logprobs, serving
from chat_server import no_proxy as no_proxy  # the autouse fixture: no proxy in this file
from project_modules import load_module
from sglang_captures import load, names

ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
GUARD_FILE = ROOT / "roles" / "sglang_guard" / "files" / "sglang_guard.py"

ADMIN_KEY = "adm-SECRET-router-0123456789"
SERVER_KEY = "sk-SECRET-server-0123456789"
WORKER_KEY = "wk-SECRET-worker-0123456789"
KEYS = (ADMIN_KEY, SERVER_KEY, WORKER_KEY)
ENV = {
    "SGLANG_GUARD_ROUTER_ADMIN_KEY": ADMIN_KEY,
    "SGLANG_GUARD_SERVER_API_KEY": SERVER_KEY,
    "SGLANG_GUARD_WORKER_API_KEY": WORKER_KEY,
}
PROMETHEUS_MISSING = (
    "prometheus_client is not installed in this venv (it is in the guard's own venv); "
    "the metrics part is not tested here"
)


def load_guard() -> ModuleType:
    """roles/sglang_guard/files/sglang_guard.py as the module ``sglang_guard``, with its neighbours (its
    own guard_config, guard_transport and guard_metrics; judge_probes, judge_verdict, fleet_topology,
    guard_policy) importable as top-level modules, as when installed."""
    added = [str(d) for d in (MODULE_UTILS, GUARD_FILE.parent) if str(d) not in sys.path]
    sys.path[:0] = added
    try:
        spec = importlib.util.spec_from_file_location("sglang_guard", GUARD_FILE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["sglang_guard"] = module
        spec.loader.exec_module(module)
    finally:
        for path in added:
            sys.path.remove(path)
    return module


GUARD = load_guard()
GUARD_TRANSPORT = sys.modules["guard_transport"]  # the daemon's HTTP and one replica's check, judged there
MODULE = load_module("sglang_inference_check")
judge = GUARD.judge_probes
policy = GUARD.guard_policy


# --- The fake fleet: one server, the router under /router, each replica under /<name>


@dataclass
class Fleet:
    """The router's workers and each replica's behaviour; records every request."""

    url: str = ""
    modes: dict[str, str] = field(
        default_factory=dict
    )  # healthy | nan | echo | slow | capture | hang | error
    capture: str = ""  # the capture a 'capture' replica answers chats with
    router_echo: bool = False  # the router answers GET /workers with an error quoting the bare key
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def replica(self, name: str) -> str:
        return f"{self.url}/{name}"

    @property
    def router(self) -> str:
        return f"{self.url}/router"

    def register(self, name: str) -> str:
        worker_id = str(uuid.uuid4())
        self.workers[worker_id] = {
            "id": worker_id,
            "url": self.replica(name),
            "is_healthy": True,
            "status": "ready",
            "load": 0,
        }
        return worker_id

    def start(self, modes: dict[str, str], registered: Iterable[str] | None = None) -> None:
        """The replicas in ``modes`` (name: behaviour) up; the router lists ``registered`` (default: all)."""
        self.modes.update(modes)
        for name in modes if registered is None else registered:
            self.register(name)

    def worker_id(self, name: str) -> str:
        return next(w["id"] for w in self.workers.values() if w["url"] == self.replica(name))

    def registered(self) -> set[str]:
        return {w["url"] for w in self.workers.values() if w["status"] != "draining"}

    def count(self, method: str, prefix: str) -> int:
        return sum(1 for m, path, _, _ in self.requests if m == method and path.startswith(prefix))

    def calls(self, method: str, prefix: str) -> list[tuple[str, dict[str, str], Any]]:
        return [(p, h, b) for m, p, h, b in self.requests if m == method and p.startswith(prefix)]


def _handler(fleet: Fleet) -> type[JsonHandler]:
    class Handler(JsonHandler):
        def answer(self, method: str, headers: dict[str, str], body: Any) -> None:
            with fleet.lock:
                fleet.requests.append((method, self.path, headers, body))
            if self.path.startswith("/router/"):
                self._router(method, headers, body)
            else:
                self._replica(method, headers, body)

        def _router(self, method: str, headers: dict[str, str], body: Any) -> None:
            if headers.get("Authorization") != f"Bearer {ADMIN_KEY}":
                self.reply(401, b'{"error": "Unauthorized"}')
                return
            if fleet.router_echo:
                token = headers["Authorization"].removeprefix("Bearer ")
                self.reply(500, f"internal error while checking the key {token}".encode())
                return
            with fleet.lock:
                if method == "GET" and self.path == "/router/workers":
                    listed = list(fleet.workers.values())
                    listing = json.dumps({"workers": listed, "total": len(listed)}).encode()
                    # A drained worker is listed once as 'draining', then gone (smg: about 5 s).
                    for worker_id in [w["id"] for w in listed if w["status"] == "draining"]:
                        del fleet.workers[worker_id]
                    self.reply(200, listing)
                elif method == "POST" and self.path == "/router/workers":
                    if body["url"] in {w["url"] for w in fleet.workers.values()}:
                        self.reply(409, b'{"error": "Worker already exists"}')
                        return
                    worker_id = str(uuid.uuid4())
                    fleet.workers[worker_id] = {
                        "id": worker_id,
                        "url": body["url"],
                        "is_healthy": True,
                        "status": "ready",
                    }
                    self.reply(202, json.dumps({"status": "accepted", "worker_id": worker_id}).encode())
                elif method == "DELETE" and self.path.startswith("/router/workers/"):
                    worker = fleet.workers.get(self.path.rsplit("/", 1)[1])
                    if worker is None:
                        self.reply(404, b'{"error": "Worker not found"}')
                        return
                    worker["status"] = "draining"
                    self.reply(202, b'{"status": "accepted"}')
                else:
                    self.reply(404, b'{"detail": "Not Found"}')

        def _replica(self, method: str, headers: dict[str, str], body: Any) -> None:
            name, _, rest = self.path.lstrip("/").partition("/")
            mode = fleet.modes.get(name)
            if mode is None:
                self.reply(404, b'{"detail": "Not Found"}')
                return
            if mode == "echo":  # a server that echoes the request headers in its error, key included
                message = f"rejected {headers.get('Authorization')}; request headers were {headers}"
                self.reply(500, json.dumps({"object": "error", "message": message}).encode())
                return
            if headers.get("Authorization") != f"Bearer {SERVER_KEY}":
                self.reply(401, b'{"object": "error", "message": "Missing API key"}')
                return
            if method == "GET" and rest == "v1/models":
                self.reply(200, load("healthy_v1_models").body)
            elif method == "POST" and rest == "v1/chat/completions":
                self._chat(mode, body)
            else:
                self.reply(404, b'{"detail": "Not Found"}')

        def _chat(self, mode: str, body: Any) -> None:
            if mode == "slow":
                time.sleep(3)
            if mode == "hang":  # no answer until the client's deadline (the server stops it at teardown)
                self.server.stopping.wait(60)  # type: ignore[attr-defined]
                return
            if mode == "error":  # an answer that cannot be judged: broken, not degenerate
                self.reply(500, b'{"object": "error", "message": "Internal server error"}')
                return
            if mode == "trickle":  # a 200 whose body never finishes, a byte every 0.1 s
                self.trickle(TRICKLE_BODY)
                return
            if mode == "capture":
                capture = load(fleet.capture)
                if capture.status is None:  # the capture has no answer: the server dropped the connection
                    self.close_connection = True
                    return
                self.reply(capture.status, capture.body)
            elif mode == "nan":
                self.reply(200, load("nan_lnf__chat_greedy_logprobs").body)
            elif "2+2" in body["messages"][0]["content"]:
                self.reply(200, load("healthy_chat_2plus2_logprobs").body)
            else:
                self.reply(200, prime_with_logprobs())

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler


@pytest.fixture
def fleet() -> Iterator[Fleet]:
    fake = Fleet()
    with serving(_handler(fake)) as url:
        fake.url = url
        yield fake


def config_for(fleet: Fleet, tmp_path: Path, replicas: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "router_url": fleet.router,
        "replicas": [fleet.replica(name) for name in replicas],
        "interval": 60,
        "fail_after": 2,
        "recover_after": 3,
        "probes": None,
        # Far above a fake replica's answer even on a loaded machine (make test runs the unit tests beside the
        # lab): a probe that timed out would reset a replica's passes and make a count-based test flaky.
        "timeout": 30,
        "logprobs": True,
        "model": None,
        "metrics_host": "127.0.0.1",
        "metrics_port": 29100,
        "hold_dir": str(tmp_path / "holds"),
        "state_file": str(tmp_path / "state" / "state.json"),
        "ca_bundle": None,
        "replica_ca_bundle": None,
        **extra,
    }


def make_guard(
    fleet: Fleet, tmp_path: Path, replicas: list[str], metrics: Any = None, quiet: bool = False, **extra: Any
) -> Any:
    """A guard over these replicas, its saved state loaded (``quiet``: its journal dropped after that)."""
    config = GUARD.Config.from_mapping(config_for(fleet, tmp_path, replicas, **extra))
    guard = GUARD.Guard(config, GUARD.Secrets.from_env(ENV), metrics=metrics, retry_delay=0)
    guard.load_state()
    if quiet:
        guard.out = lambda line: None
    return guard


def start_guard(
    fleet: Fleet, tmp_path: Path, modes: dict[str, str], registered: Iterable[str] | None = None, **kw: Any
) -> Any:
    """The fleet started as Fleet.start(modes, registered), and make_guard over all its replicas."""
    fleet.start(modes, registered)
    return make_guard(fleet, tmp_path, list(modes), **kw)


def assert_no_keys(text: str) -> None:
    for key in KEYS:
        assert key not in text
    assert "SECRET" not in text  # no fragment either


# --- One cycle: verdicts


def test_one_cycle_judges_each_replica_with_the_module_probes(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy", "gpu-b": "nan"})

    report = guard.cycle()

    a, b = fleet.replica("gpu-a"), fleet.replica("gpu-b")
    assert report.router_up
    assert report.checks[a].passed and report.checks[a].model == "/srv/models/tiny-chat-gpt2"
    assert [p["name"] for p in report.checks[a].probes] == ["2+2", "prime"]
    assert not report.checks[b].passed
    symptom = report.checks[b].symptom
    assert symptom.startswith("probe '2+2': degenerate output '!!!!!!!!!!!!!!!!' ('!' repeated 16 times)")
    assert "32 of 32 logprobs are null" in symptom and " | probe 'prime': " in symptom
    assert (guard.states[a].verdict, guard.states[b].verdict) == ("pass", "fail")
    assert report.actions == [] and fleet.count("DELETE", "/router") == 0

    # The requests are the module's: model from /v1/models, logprobs, temperature 0, the server key.
    chats = fleet.calls("POST", "/gpu-a/v1/chat/completions")
    assert [body["messages"][0]["content"] for _, _, body in chats] == [
        probe["prompt"] for probe in judge.DEFAULT_PROBES
    ]
    assert all(
        body["model"] == "/srv/models/tiny-chat-gpt2" and body["logprobs"] is True for *_, body in chats
    )
    assert all(h["Authorization"] == f"Bearer {SERVER_KEY}" for _, h, _ in fleet.calls("POST", "/gpu-"))
    assert all(h["Authorization"] == f"Bearer {ADMIN_KEY}" for _, h, _ in fleet.calls("GET", "/router"))

    out = capsys.readouterr().out.splitlines()
    assert f"verdict replica={a} result=pass passes=1" in out
    assert any(
        line.startswith(f"verdict replica={b} result=fail failures=1 symptom=\"probe '2+2'") for line in out
    )
    assert_no_keys("\n".join(out))
    saved = json.loads((tmp_path / "state" / "state.json").read_text())
    assert saved["replicas"][b]["consecutive_failures"] == 1


def test_poisoned_replica_goes_out_after_k_cycles_and_back_after_m(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy", "gpu-b": "nan"})
    b, b_id = fleet.replica("gpu-b"), fleet.worker_id("gpu-b")

    guard.cycle()
    assert fleet.count("DELETE", "/router") == 0
    report = guard.cycle()
    assert [(a.kind, a.url) for a in report.actions] == [("remove", b)]
    assert [path for path, _, _ in fleet.calls("DELETE", "/router")] == [f"/router/workers/{b_id}"]
    assert guard.states[b].removed_by_guard and not guard.states[b].in_router
    assert b not in fleet.registered()

    guard.cycle()  # the router still lists it as draining: not registered, not deleted again
    guard.cycle()  # gone
    assert fleet.count("DELETE", "/router") == 1

    fleet.modes["gpu-b"] = "healthy"  # fixed (say, restarted by hand without a hold)
    for number in range(1, 4):
        report = guard.cycle()
        assert fleet.count("POST", "/router/workers") == (1 if number == 3 else 0), number
    assert [body for _, _, body in fleet.calls("POST", "/router/workers")] == [
        {"url": b, "api_key": WORKER_KEY}
    ]
    assert b in fleet.registered()
    state = guard.states[b]
    assert (state.in_router, state.removed_by_guard, state.transitions_out, state.transitions_in) == (
        True,
        False,
        1,
        1,
    )

    out = capsys.readouterr().out
    assert f"transition replica={b} out after 2 failed verdicts: probe '2+2': degenerate output" in out
    assert f"transition replica={b} in after 3 passed verdicts" in out
    assert_no_keys(out)


def test_re_adding_without_a_worker_key_sends_no_api_key(fleet: Fleet, tmp_path: Path) -> None:
    fleet.start({"gpu-a": "healthy", "gpu-b": "healthy"}, registered=["gpu-a"])
    config = GUARD.Config.from_mapping(config_for(fleet, tmp_path, ["gpu-a", "gpu-b"], recover_after=1))
    secrets = GUARD.Secrets.from_env({**ENV, "SGLANG_GUARD_WORKER_API_KEY": ""})
    guard = GUARD.Guard(config, secrets, retry_delay=0, out=lambda line: None)
    b = fleet.replica("gpu-b")
    guard.cycle()
    assert [body for _, _, body in fleet.calls("POST", "/router/workers")] == [{"url": b}]


def test_the_last_healthy_replica_is_never_deleted(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guard = start_guard(fleet, tmp_path, {"gpu-a": "nan", "gpu-b": "nan"})
    for _ in range(3):
        guard.cycle()
    assert fleet.count("DELETE", "/router") == 0
    assert fleet.registered() == {fleet.replica("gpu-a"), fleet.replica("gpu-b")}
    assert [s.alerts for s in guard.states.values()] == [2, 2]
    out = capsys.readouterr().out
    alert = f"alert replica={fleet.replica('gpu-a')} failures=3: {policy.LAST_REPLICA_REASON}: probe '2+2'"
    assert alert in out


def test_a_held_replica_is_not_probed_nor_removed(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy", "gpu-b": "nan"})
    b = fleet.replica("gpu-b")
    holds = tmp_path / "holds"
    holds.mkdir()
    (holds / "gpu-b").write_text(b + "/\nwritten by the rolling update\n")
    (holds / "empty").write_text("")
    (holds / "a-directory").mkdir()

    for _ in range(3):
        guard.cycle()
    assert fleet.count("GET", "/gpu-b/") == fleet.count("POST", "/gpu-b/") == 0
    assert fleet.count("DELETE", "/router") == 0
    assert (guard.states[b].verdict, guard.states[b].held) == ("held", True)
    out = capsys.readouterr().out
    assert f"verdict replica={b} result=held" in out
    assert f"holds: the hold marker {holds / 'empty'} is empty; ignored" in out

    (holds / "gpu-b").unlink()  # released, still poisoned: K fresh failures, then out
    guard.cycle()
    assert fleet.count("DELETE", "/router") == 0
    guard.cycle()
    assert fleet.count("DELETE", "/router") == 1


def test_unreadable_holds_mean_no_router_actions(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy", "gpu-b": "nan"})
    (tmp_path / "holds").write_text("not a directory")  # listing it fails like a directory we may not read
    for _ in range(3):
        report = guard.cycle()
        assert report.router_up and report.actions == []
    assert fleet.count("DELETE", "/router") == 0
    assert guard.states[fleet.replica("gpu-b")].consecutive_failures == 3
    out = capsys.readouterr().out
    assert "holds: cannot list the hold directory" in out and "holds: unknown, so no router actions" in out


def test_read_holds(tmp_path: Path) -> None:
    assert GUARD.read_holds(tmp_path / "missing") == (set(), [])
    holds = tmp_path / "holds"
    holds.mkdir()
    (holds / "0a1b").write_text("  http://gpu-node-1:30000/ \nwritten by a playbook\n")
    (holds / "sub").mkdir()
    assert GUARD.read_holds(holds) == ({"http://gpu-node-1:30000"}, [])
    if os.geteuid() != 0:  # root reads anything: the unreadable marker cannot be made
        (holds / "locked").write_text("http://gpu-node-2:30000")
        (holds / "locked").chmod(0)
        held, problems = GUARD.read_holds(holds)
        assert held is None and "cannot read the hold marker" in problems[0]


def test_a_replica_someone_else_took_out_comes_back_after_m_passes(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # gpu-b was taken out by a playbook or an operator, without a hold
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy", "gpu-b": "healthy"}, registered=["gpu-a"])
    b = fleet.replica("gpu-b")
    for number in range(1, 4):
        guard.cycle()
        assert fleet.count("POST", "/router") == (1 if number == 3 else 0), number
    assert [body for _, _, body in fleet.calls("POST", "/router/workers")] == [
        {"url": b, "api_key": WORKER_KEY}
    ]
    assert b in fleet.registered()
    state = guard.states[b]
    assert (state.in_router, state.removed_by_guard, state.transitions_in) == (True, False, 1)
    out = capsys.readouterr().out
    assert f"transition replica={b} in after 3 passed verdicts" in out
    assert_no_keys(out)


def test_a_held_replica_out_of_the_router_is_never_added_back(fleet: Fleet, tmp_path: Path) -> None:
    # gpu-b is kept out on purpose: a hold marker says so
    modes = {"gpu-a": "healthy", "gpu-b": "healthy"}
    guard = start_guard(fleet, tmp_path, modes, registered=["gpu-a"], quiet=True)
    b = fleet.replica("gpu-b")
    holds = tmp_path / "holds"
    holds.mkdir()
    (holds / "gpu-b").write_text(b + "\nkept out by an operator\n")
    for _ in range(6):
        guard.cycle()
    assert fleet.count("POST", "/router") == 0 and b not in fleet.registered()
    assert fleet.count("POST", "/gpu-b/") == 0  # not even probed
    assert (guard.states[b].verdict, guard.states[b].consecutive_passes) == ("held", 0)

    (holds / "gpu-b").unlink()  # released: M fresh passes, then back
    for number in range(1, 4):
        guard.cycle()
        assert fleet.count("POST", "/router") == (1 if number == 3 else 0), number
    assert b in fleet.registered()


def test_a_router_that_lost_all_its_workers_is_refilled_after_m_passes(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The router is started with no workers; restarted outside Ansible, it comes back empty. The guard puts
    back every replica that passed its last M checks, and no other."""
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy", "gpu-b": "healthy", "gpu-c": "healthy"})
    a, b, c = (fleet.replica(name) for name in ("gpu-a", "gpu-b", "gpu-c"))
    for _ in range(3):
        guard.cycle()
    assert fleet.count("POST", "/router") == 0

    with fleet.lock:
        fleet.workers.clear()  # the router restarted (host reboot, crash): empty
    fleet.modes["gpu-c"] = "nan"  # and gpu-c went bad meanwhile
    report = guard.cycle()  # a and b passed M checks in a row already (this one included)
    assert [(action.kind, action.url) for action in report.actions] == [("add", a), ("add", b)]
    assert fleet.registered() == {a, b}
    for _ in range(3):
        report = guard.cycle()
        assert report.actions == []  # c fails: out it stays; not registered, so nothing to remove or alert
    assert fleet.registered() == {a, b}

    fleet.modes["gpu-c"] = "healthy"
    for number in range(1, 4):
        guard.cycle()
        assert fleet.registered() == ({a, b, c} if number == 3 else {a, b}), number
    assert [body["url"] for _, _, body in fleet.calls("POST", "/router/workers")] == [a, b, c]
    assert not any(s.removed_by_guard for s in guard.states.values())
    assert_no_keys(capsys.readouterr().out)


def test_a_guard_and_router_starting_from_nothing_fill_the_router_after_m_passes(
    fleet: Fleet, tmp_path: Path
) -> None:
    """No state file and an empty router (first start, or the router host rebooted without the state): the
    first M - 1 cycles add nothing, the M-th adds every replica that passed them all."""
    modes = {"gpu-a": "healthy", "gpu-b": "healthy", "gpu-c": "nan"}
    guard = start_guard(fleet, tmp_path, modes, registered=[], quiet=True)
    for number in range(1, 4):
        report = guard.cycle()
        assert report.router_up
        assert fleet.count("POST", "/router") == (2 if number == 3 else 0), number
    assert fleet.registered() == {fleet.replica("gpu-a"), fleet.replica("gpu-b")}
    assert fleet.count("DELETE", "/router") == 0


def test_a_replica_a_playbook_put_back_is_released_by_the_guard(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy", "gpu-b": "nan"})
    b = fleet.replica("gpu-b")
    guard.cycle(), guard.cycle(), guard.cycle(), guard.cycle()
    assert guard.states[b].removed_by_guard and b not in fleet.registered()

    fleet.modes["gpu-b"] = "healthy"
    fleet.register("gpu-b")  # the rolling update put it back
    guard.cycle()
    assert not guard.states[b].removed_by_guard and guard.states[b].in_router
    assert (
        f"note replica={b} is back in the router and the guard did not put it there"
        in capsys.readouterr().out
    )
    assert fleet.count("POST", "/router") == 0


def test_router_unreachable_means_verdicts_but_no_actions(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    modes = {"gpu-a": "healthy", "gpu-b": "nan"}
    guard = start_guard(fleet, tmp_path, modes, registered=[], router_url=down)
    b = fleet.replica("gpu-b")
    guard.states[b].in_router = True
    guard.states[b].consecutive_failures = 5
    report = guard.cycle()
    assert not report.router_up and report.actions == []
    assert guard.states[b].consecutive_failures == 6 and guard.states[b].in_router
    assert f"router unreachable at {down}: connection refused; no router actions this cycle" in (
        capsys.readouterr().out
    )


def test_router_refusing_the_admin_key_is_reported_not_acted_on(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.start({"gpu-a": "healthy"})
    config = GUARD.Config.from_mapping(config_for(fleet, tmp_path, ["gpu-a"]))
    guard = GUARD.Guard(config, GUARD.Secrets(server_api_key=SERVER_KEY), retry_delay=0)
    report = guard.cycle()
    assert not report.router_up
    assert "GET /workers answered HTTP 401" in capsys.readouterr().out
    assert all("Authorization" not in h for _, h, _ in fleet.calls("GET", "/router"))


def test_a_key_echoed_by_the_router_is_scrubbed_from_the_journal(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.router_echo = True
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy"}, registered=[])
    assert not guard.cycle().router_up
    out = capsys.readouterr().out
    assert "GET /workers answered HTTP 500: internal error while checking the key <redacted>" in out
    assert_no_keys(out)


def test_the_guards_removals_survive_a_restart(fleet: Fleet, tmp_path: Path) -> None:
    first = start_guard(fleet, tmp_path, {"gpu-a": "healthy", "gpu-b": "nan"})
    b = fleet.replica("gpu-b")
    first.cycle(), first.cycle()
    assert fleet.count("DELETE", "/router") == 1

    fleet.modes["gpu-b"] = "healthy"
    second = make_guard(fleet, tmp_path, ["gpu-a", "gpu-b"])  # a new process, same state file
    assert second.states[b].removed_by_guard and second.states[b].transitions_out == 1
    for _ in range(3):
        second.cycle()
    assert fleet.count("POST", "/router/workers") == 1
    assert not list((tmp_path / "state").glob(".*.tmp"))


def test_a_damaged_state_file_starts_from_scratch(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text("{not json")
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy"}, registered=[])
    assert "state: cannot read" in capsys.readouterr().out
    assert not guard.states[fleet.replica("gpu-a")].removed_by_guard


def test_keys_never_reach_the_logs_the_state_or_the_once_output(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.start({"gpu-a": "healthy", "gpu-e": "echo"})
    path = tmp_path / "guard.json"
    path.write_text(json.dumps(config_for(fleet, tmp_path, ["gpu-a", "gpu-e"], model="default")))
    for _ in range(3):
        assert GUARD.main(["--config", str(path), "--once"], environ=ENV) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out[captured.out.rindex("\n{\n") :])
    e = fleet.replica("gpu-e")
    # The echoing replica did send our key back, and it was scrubbed everywhere.
    assert "Bearer <redacted>" in document["states"][e]["symptom"]
    assert document["states"][e]["removed_by_guard"] and document["actions"] == []  # out in run 2
    assert fleet.count("DELETE", "/router") == 1
    assert_no_keys(captured.out + captured.err)
    assert_no_keys((tmp_path / "state" / "state.json").read_text())
    assert repr(GUARD.Secrets.from_env(ENV)) == "Secrets()"


def test_once_prints_the_states_as_json(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.start({"gpu-a": "healthy"})
    path = tmp_path / "guard.json"
    path.write_text(json.dumps(config_for(fleet, tmp_path, ["gpu-a"])))
    assert GUARD.main(["--config", str(path), "--once"], environ=ENV) == 0
    out = capsys.readouterr().out
    document = json.loads(out[out.index("{\n") :])
    a = fleet.replica("gpu-a")
    assert document["router_up"] is True
    assert document["states"][a]["verdict"] == "pass" and document["states"][a]["in_router"] is True
    assert [p["name"] for p in document["checks"][a]["probes"]] == ["2+2", "prime"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"replicas": []}, "'replicas' must be a non-empty list"),
        ({"replicas": ["gpu-node-1:30000"]}, "'replicas[0]' must be an http:// or https:// URL"),
        ({"router_url": None}, "'router_url' must be an http:// or https:// URL"),
        ({"fail_after": 0}, "fail_after must be an integer of at least 1"),
        ({"interval": 0}, "'interval' must be a number of seconds above 0"),
        ({"probes": [{"name": "x"}]}, "probes: probe 'x' needs exactly one of 'prompt' or 'messages'"),
        ({"metrics_port": 70000}, "'metrics_port' must be a TCP port"),
        ({"fail_afer": 3}, "unknown keys ['fail_afer']"),
        ({"max_removal_fraction": 0}, "max_removal_fraction must be a number above 0 and at most 1"),
        ({"max_removal_fraction": 1.5}, "max_removal_fraction must be a number above 0 and at most 1"),
        ({"workers": 0}, "'workers' must be an integer of at least 1"),
        ({"router_poll": 0}, "'router_poll' must be a number of seconds above 0"),
    ],
)
def test_bad_config_exits_2_with_a_clear_message(
    fleet: Fleet, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], words: str
) -> None:
    data = config_for(fleet, tmp_path, ["gpu-a"])
    data.update(change)
    if change.get("replicas") == ["gpu-node-1:30000"]:
        data["replicas"] = change["replicas"]
    path = tmp_path / "guard.json"
    path.write_text(json.dumps(data))
    assert GUARD.main(["--config", str(path), "--once"], environ=ENV) == 2
    assert words in capsys.readouterr().err


def test_config_defaults_and_url_normalization(fleet: Fleet, tmp_path: Path) -> None:
    config = GUARD.Config.from_mapping(
        {"router_url": "http://127.0.0.1:30000/", "replicas": [" http://gpu-node-1:30000/ "]}
    )
    assert config.router_url == "http://127.0.0.1:30000"
    assert config.replicas == ("http://gpu-node-1:30000",)
    assert (config.interval, config.fail_after, config.recover_after, config.timeout) == (60, 2, 3, 120)
    assert (config.max_removal_fraction, config.router_poll, config.workers) == (0.5, 1, 64)
    assert [p.name for p in config.probes] == ["2+2", "prime"]
    assert (config.metrics_host, config.metrics_port, config.verify) == ("127.0.0.1", 29100, True)
    assert config.replica_verify is True
    both = GUARD.Config.from_mapping(
        {"router_url": "https://r:30000", "replicas": ["https://a:30000"], "ca_bundle": "/etc/r.pem",
         "replica_ca_bundle": "/etc/n.pem"}
    )  # fmt: skip
    assert (both.verify, both.replica_verify) == ("/etc/r.pem", "/etc/n.pem")
    with pytest.raises(GUARD.ConfigError, match="'replica_ca_bundle' must be a non-empty string"):
        GUARD.Config.from_mapping(
            {"router_url": "http://r", "replicas": ["http://a"], "replica_ca_bundle": ""}
        )
    with pytest.raises(GUARD.ConfigError, match="lists a URL twice"):
        GUARD.Config.from_mapping({"router_url": "http://r", "replicas": ["http://a/", "http://a"]})


# --- Schedule and stopping


@pytest.mark.parametrize(
    ("previous", "now", "expected"),
    [
        (100.0, 130.0, (160.0, 0)),
        (100.0, 159.9, (160.0, 0)),
        (100.0, 160.0, (220.0, 1)),
        (100.0, 290.0, (340.0, 3)),
    ],
)
def test_next_tick_stays_on_the_grid(previous: float, now: float, expected: tuple[float, int]) -> None:
    assert GUARD.next_tick(previous, 60.0, now) == expected


@pytest.mark.timing
def test_run_forever_stops_promptly(fleet: Fleet, tmp_path: Path) -> None:
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy"}, interval=30, quiet=True)
    thread = threading.Thread(target=guard.run_forever, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while guard.states[fleet.replica("gpu-a")].verdict is None and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    guard.stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - started < 1.0
    assert fleet.count("POST", "/gpu-a/v1/chat/completions") == 2  # one cycle, not a busy loop


@pytest.mark.timing
def test_a_stop_during_slow_probes_abandons_the_cycle(fleet: Fleet, tmp_path: Path) -> None:
    guard = start_guard(fleet, tmp_path, {"gpu-a": "slow"}, quiet=True)
    threading.Timer(0.3, guard.stop.set).start()
    started = time.monotonic()
    assert guard.cycle() is None
    assert time.monotonic() - started < 2.0 and guard.abandoned == 1
    assert not (tmp_path / "state" / "state.json").exists()


# --- At fleet scale: each replica on its own schedule, the removal cap, the router's health


FOUR_ONLY = [
    dict(judge.DEFAULT_PROBES[0])
]  # one probe per check: 128 replicas fit a 2-CPU machine's interval


@dataclass
class Journal:
    """The guard's journal lines, each with the monotonic time it was written."""

    lines: list[tuple[float, str]] = field(default_factory=list)

    def __call__(self, line: str) -> None:
        self.lines.append((time.monotonic(), line))

    def find(self, text: str) -> list[float]:
        return [at for at, line in list(self.lines) if text in line]


# How long the 128-replica tests wait for a step before they call the guard stuck. Waits, not promises: what
# the guard promises is asserted on the journal's times, and the unit suite runs beside the lab's in make test
# at a low CPU weight, where 128 checks at once took longer than 5 intervals of 2 s once.
STUCK_AFTER = 60.0


def wait_for(what: str, condition: Any, timeout: float) -> Any:
    """Poll ``condition`` until it is true (returned) or ``timeout`` seconds pass (the test fails)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def running_guard(guard: Any) -> threading.Thread:
    thread = threading.Thread(target=guard.run_forever, daemon=True)
    thread.start()
    return thread


def stop_guard(guard: Any, thread: threading.Thread) -> None:
    guard.stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive()


def fleet_of(count: int, special: dict[str, str]) -> dict[str, str]:
    modes = {f"r{number:03d}": "healthy" for number in range(count)}
    modes.update(special)
    return modes


@pytest.mark.timing
def test_a_hanging_replica_delays_no_other_verdict_at_fleet_scale(fleet: Fleet, tmp_path: Path) -> None:
    """128 replicas, one hanging until its timeout, one poisoned: the poisoned one is out within K + 1
    intervals (its K verdicts, plus one interval of slack for the first round's 128 checks at once), well
    before the hanging check's timeout ends. A timing test (marker timing): make unit runs it at the ordinary
    CPU weight. At the low weight the rest of the suite runs at in make test (beside the lab's), the first
    round's 128 checks took the whole slack and more, at a 3-s interval and once at 5 s."""
    interval = 5.0
    modes = fleet_of(128, {"r010": "hang", "r020": "nan"})
    fleet.start(modes)
    journal = Journal()
    guard = make_guard(
        fleet, tmp_path, list(modes), interval=interval, timeout=20, model="default", probes=FOUR_ONLY
    )
    guard.out = journal
    poisoned, hanging = fleet.replica("r020"), fleet.replica("r010")
    started = time.monotonic()
    thread = running_guard(guard)
    try:
        (out,) = wait_for(
            "the poisoned replica out",
            lambda: journal.find(f"transition replica={poisoned} out "),
            4 * interval,
        )
    finally:
        stop_guard(guard, thread)
    assert out - started <= (guard.config.fail_after + 1) * interval, out - started
    assert fleet.registered() == {fleet.replica(name) for name in modes} - {poisoned}
    assert fleet.count("DELETE", "/router") == 1 <= guard.cap
    # The hanging replica was asked once and never again while its check ran; it has no verdict yet.
    assert fleet.count("POST", "/r010/") == 1 and guard.states[hanging].verdict is None
    assert len(journal.find(f"verdict replica={poisoned} result=fail")) == guard.config.fail_after


@pytest.mark.timing
def test_127_of_128_failing_are_taken_out_at_most_the_cap_per_interval(fleet: Fleet, tmp_path: Path) -> None:
    """127 replicas answer HTTP 500 (not degenerate: the cap applies), one is healthy. At most the cap (half
    the fleet, 64) goes out per interval, each one held in by the cap alerts, and the healthy one stays. The
    interval is 10 s: the guard spreads each round's 128 checks over an interval, so the 65th second failure
    comes about half an interval after the first, and the cap holds a replica in only while that stays under
    one interval. At 2 s that left a second for a starved CPU's delays (make test runs the unit suite at a low
    CPU weight beside the lab's), and a rehearsal waited 60 s for the cap's line in vain; 10 s leaves five. A
    timing test (marker timing): make unit runs it at the ordinary CPU weight."""
    interval = 10.0
    modes = fleet_of(128, {f"r{number:03d}": "error" for number in range(1, 128)})
    fleet.start(modes)
    journal = Journal()
    registry = None
    metrics = None
    with contextlib.suppress(ImportError):
        import prometheus_client

        registry = prometheus_client.CollectorRegistry()
        metrics = GUARD.Metrics(registry)
    guard = make_guard(
        fleet,
        tmp_path,
        list(modes),
        metrics=metrics,
        interval=interval,
        model="default",
        probes=FOUR_ONLY,
        workers=128,
    )
    guard.out = journal
    assert guard.cap == 64
    thread = running_guard(guard)
    try:
        wait_for("the cap to hold replicas in", lambda: journal.find("removal cap is reached"), STUCK_AFTER)
        if registry is not None:
            held_in = wait_for(
                "the metric of the replicas the cap holds in",
                lambda: sum(
                    registry.get_sample_value(
                        "glm5_guard_kept_in", {"replica": fleet.replica(name), "rule": "removal-cap"}
                    )
                    or 0
                    for name in modes
                ),
                STUCK_AFTER,
            )
            assert 0 < held_in <= 127 - 64
        wait_for("127 replicas out", lambda: len(fleet.registered()) == 1, 2 * STUCK_AFTER)
    finally:
        stop_guard(guard, thread)
    assert fleet.registered() == {fleet.replica("r000")}  # the healthy one stays
    outs = sorted(journal.find(" out after "))
    assert len(outs) == 127
    for at in outs:  # never more than the cap within one interval (less a little for the clock of the log)
        assert sum(1 for other in outs if at - interval + 0.1 < other <= at) <= guard.cap, at
    assert outs[-1] - outs[0] >= interval - 0.1  # the rest had to wait for the next interval
    alerts = [line for _, line in journal.lines if line.startswith("alert ") and "removal cap" in line]
    assert alerts and all("the removal cap is reached (64 per interval of 128 replicas)" in a for a in alerts)


@pytest.mark.timing
def test_a_replica_the_router_reports_unhealthy_goes_out_at_once_and_back_only_after_m_passes(
    fleet: Fleet, tmp_path: Path
) -> None:
    interval = 2.0
    modes = {"gpu-a": "healthy", "gpu-b": "healthy", "gpu-c": "healthy"}
    fleet.start(modes)
    c_id = fleet.worker_id("gpu-c")
    fleet.workers[c_id]["is_healthy"] = False  # never reported healthy yet (just registered): left alone
    journal = Journal()
    guard = make_guard(fleet, tmp_path, list(modes), interval=interval, router_poll=0.1, recover_after=2)
    guard.out = journal
    b = fleet.replica("gpu-b")
    thread = running_guard(guard)
    try:
        wait_for(
            "a first verdict on b", lambda: journal.find(f"verdict replica={b} result=pass"), 4 * interval
        )
        wait_for("a router poll after it", lambda: fleet.count("GET", "/router/workers") >= 3, interval)
        with fleet.lock:
            fleet.workers[fleet.worker_id("gpu-b")]["is_healthy"] = False  # its engine stopped
            flagged = time.monotonic()
        (out,) = wait_for(
            "b out on the router's word",
            lambda: journal.find(f"transition replica={b} out at once"),
            interval,
        )
        assert out - flagged < interval  # before its next check could have told
        assert journal.find(f"note replica={b} router health check failed")
        deleted = fleet.count("POST", "/gpu-b/")
        # Its engine is back (it still answers well): only M passing verdicts put it back.
        wait_for("b back in the router", lambda: b in fleet.registered(), 5 * interval)
        assert fleet.count("POST", "/gpu-b/") - deleted >= guard.config.recover_after
        # The line follows the router's answer to the re-registration (apply_outcome), a moment later.
        wait_for(
            "b's transition line",
            lambda: journal.find(f"transition replica={b} in after 2 passed verdicts"),
            interval,
        )
    finally:
        stop_guard(guard, thread)
    assert fleet.replica("gpu-c") in fleet.registered()
    assert [path for path, _, _ in fleet.calls("DELETE", "/router")] != [f"/router/workers/{c_id}"]
    assert not [p for p, _, _ in fleet.calls("DELETE", "/router") if p.endswith(c_id)]


def test_a_typo_in_a_probe_takes_no_replica_out(fleet: Fleet, tmp_path: Path, capsys: Any) -> None:
    """Every replica fails the same probe with sound answers: the probe is suspect, the replicas stay in."""
    modes = {"gpu-a": "healthy", "gpu-b": "healthy", "gpu-c": "healthy"}
    typo = [{**dict(judge.DEFAULT_PROBES[0]), "expect": "^five$"}]
    guard = start_guard(fleet, tmp_path, modes, model="default", probes=typo)
    for _ in range(3):
        report = guard.cycle()
    assert fleet.count("DELETE", "/router") == 0
    assert {action.kind for action in report.actions} == {"alert"}
    assert {state.kept_by for state in guard.states.values()} == {"suspect-probe"}
    out = capsys.readouterr().out
    assert "every replica judged fails probe '2+2' with sound answers: the probe is suspect" in out


# --- The guard's verdict is the module's verdict


CHAT_FIXTURES = [name for name in names() if "_chat_" in name]


def probe_for(fixture: str) -> dict[str, Any]:
    if "prime" in fixture:
        return dict(judge.DEFAULT_PROBES[1])
    if "hello" in fixture:
        return dict(HELLO)
    return dict(judge.DEFAULT_PROBES[0])


def run_module(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        MODULE.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("guard_copy", "module_copy"),
    [(judge, module_probes), (GUARD_TRANSPORT.judge_verdict, module_verdict)],
    ids=["judge_probes", "judge_verdict"],
)
def test_guard_and_module_share_one_judge(guard_copy: ModuleType, module_copy: ModuleType) -> None:
    name = module_copy.__name__.rpartition(".")[2]
    assert (
        Path(guard_copy.__file__).resolve()
        == Path(module_copy.__file__).resolve()
        == MODULE_UTILS / (name + ".py")
    )
    assert guard_copy is not module_copy  # two imports of one file: the test below compares real behaviour


def test_the_guard_code_runs_flat_without_the_collection(tmp_path: Path) -> None:
    """The role copies ``__sglang_guard_code`` flat into one lib dir of the router host, where no
    ansible_collections is importable: the daemon and the judge files it names find each other there."""
    code = yaml.safe_load((GUARD_FILE.parents[1] / "vars" / "main.yml").read_text())["__sglang_guard_code"]
    for name in code:
        (tmp_path / name).write_bytes((GUARD_FILE.parent / name).read_bytes())
    script = (
        "import sys, sglang_guard, judge_probes, guard_transport\n"
        "assert not any(name.startswith('ansible_collections.glm5') for name in sys.modules)\n"
        "assert judge_probes.judge_verdict is guard_transport.judge_verdict\n"
        "print(judge_probes.first_model_id(401, b'')[1])\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    child = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("GET /v1/models: the server refused the API key (HTTP 401)")


def test_there_are_chat_fixtures_of_both_kinds() -> None:
    assert any(n.startswith("healthy_") for n in CHAT_FIXTURES) and any(
        n.startswith("nan_") for n in CHAT_FIXTURES
    )
    assert "nan_lnf__chat_sampled_t0.8_top_p0.9" in CHAT_FIXTURES  # the one without an answer (a crash)


@pytest.mark.parametrize("logprobs", [True, False], ids=["logprobs", "no-logprobs"])
@pytest.mark.parametrize("fixture", CHAT_FIXTURES)
def test_guard_verdict_equals_module_verdict(
    fixture: str, logprobs: bool, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.modes["eq"] = "capture"
    fleet.capture = fixture
    url = fleet.replica("eq")
    probe = probe_for(fixture)
    module = run_module(
        {
            "url": url,
            "api_key": SERVER_KEY,
            "model": "default",
            "probes": [probe],
            "logprobs": logprobs,
            "timeout": 10,
            "retries": 0,
            "retry_delay": 0,
        },
        capsys,
    )
    guard = GUARD.check_replica(
        url,
        judge.normalize_probes([probe]),
        api_key=SERVER_KEY,
        model="default",
        logprobs=logprobs,
        timeout=10,
        retries=0,
        retry_delay=0,
    )

    assert fleet.count("POST", "/eq/v1/chat/completions") == 2  # one each, nothing retried
    bodies = [body for _, _, body in fleet.calls("POST", "/eq/")]
    assert bodies[0] == bodies[1]  # the same request
    keep = [key for key in module["probes"][0] if key != "latency_s"]
    assert {k: guard.probes[0][k] for k in keep} == {k: module["probes"][0][k] for k in keep}
    assert guard.passed == module["passed"]
    if module["passed"]:
        assert guard.symptom == "" and "msg" not in module
    else:
        assert module["msg"].endswith(f"1 of 1 probes failed: {guard.symptom}")


@pytest.mark.parametrize("mode", ["healthy", "nan"])
def test_default_probes_with_model_discovery_match_the_module(
    mode: str, fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.modes["eq"] = mode
    url = fleet.replica("eq")
    module = run_module({"url": url, "api_key": SERVER_KEY, "retry_delay": 0}, capsys)
    guard = GUARD.check_replica(url, judge.normalize_probes(None), api_key=SERVER_KEY, retry_delay=0)
    assert guard.model == module["model"] == "/srv/models/tiny-chat-gpt2"
    assert [(p["name"], p["passed"], p["failures"]) for p in guard.probes] == [
        (p["name"], p["passed"], p["failures"]) for p in module["probes"]
    ]
    assert guard.passed is module["passed"] is (mode == "healthy")
    if mode == "nan":
        assert module["msg"].endswith(f"2 of 2 probes failed: {guard.symptom}")


def test_refused_connection_is_retried_and_described_as_the_module_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    probe = dict(judge.DEFAULT_PROBES[0])
    module = run_module({"url": url, "model": "m", "probes": [probe], "retries": 2, "retry_delay": 0}, capsys)
    guard = GUARD.check_replica(url, judge.normalize_probes([probe]), model="m", retries=2, retry_delay=0)
    assert (
        guard.probes[0]["failures"]
        == module["probes"][0]["failures"]
        == [
            "connection refused",
            "gave up after 3 attempts",
        ]
    )
    assert guard.probes[0]["attempts"] == module["probes"][0]["attempts"] == 3
    listing = GUARD.check_replica(url, judge.normalize_probes(None), retries=1, retry_delay=0)
    assert (
        listing.symptom
        == f"cannot list the models at {url}/v1/models: connection refused, gave up after 2 attempts"
    )


def test_timeout_is_described_as_the_module_does(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    fleet.modes["eq"] = "slow"
    url = fleet.replica("eq")
    probe = dict(judge.DEFAULT_PROBES[0])
    module = run_module(
        {"url": url, "api_key": SERVER_KEY, "model": "m", "probes": [probe], "timeout": 1, "retry_delay": 0},
        capsys,
    )
    guard = GUARD.check_replica(
        url, judge.normalize_probes([probe]), api_key=SERVER_KEY, model="m", timeout=1
    )
    words = (
        r"no complete answer within the 1 s deadline: 0 bytes received after 1\.\d s, "
        r"not even the status line and headers \(a stalled or trickling server\)"
    )
    for failures in (guard.probes[0]["failures"], module["probes"][0]["failures"]):
        assert len(failures) == 1 and re.fullmatch(words, failures[0]), failures


@pytest.mark.timing
def test_a_trickling_replica_cannot_hold_the_guard(fleet: Fleet, capsys: pytest.CaptureFixture[str]) -> None:
    """A replica that sends a byte every 0.1 s never trips a socket timeout; the deadline stops it."""
    fleet.modes["eq"] = "trickle"
    url = fleet.replica("eq")
    probe = dict(judge.DEFAULT_PROBES[0])
    started = time.monotonic()
    guard = GUARD.check_replica(
        url, judge.normalize_probes([probe]), api_key=SERVER_KEY, model="m", timeout=2
    )
    assert time.monotonic() - started < 6  # the trickle alone would run for 30 s
    module = run_module(
        {"url": url, "api_key": SERVER_KEY, "model": "m", "probes": [probe], "timeout": 2, "retry_delay": 0},
        capsys,
    )
    words = (
        r"no complete answer within the 2 s deadline: HTTP 200, then (\d+) bytes of the body received "
        r"after 2\.\d s \(a stalled or trickling server\)"
    )
    for failures in (guard.probes[0]["failures"], module["probes"][0]["failures"]):
        found = re.fullmatch(words, failures[0])
        assert len(failures) == 1 and found and int(found.group(1)) >= 8, failures
    assert not guard.passed and guard.symptom.startswith("probe '2+2': no complete answer within the 2 s")


def test_a_refused_key_is_described_as_the_module_does(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.modes["eq"] = "healthy"
    url = fleet.replica("eq")
    probe = dict(judge.DEFAULT_PROBES[0])
    module = run_module({"url": url, "api_key": "wrong", "model": "m", "probes": [probe]}, capsys)
    guard = GUARD.check_replica(url, judge.normalize_probes([probe]), api_key="wrong", model="m")
    assert (
        guard.probes[0]["failures"]
        == module["probes"][0]["failures"]
        == [
            "the server refused the API key (HTTP 401): check sglang_server_api_key / the key the check sends"
        ]
    )
    listing = GUARD.check_replica(url, judge.normalize_probes([probe]), api_key="wrong")
    assert listing.symptom == (
        "GET /v1/models: the server refused the API key (HTTP 401): "
        "check sglang_server_api_key / the key the check sends"
    )


# --- Metrics


def test_metrics_follow_the_states_and_carry_no_keys(fleet: Fleet, tmp_path: Path) -> None:
    prometheus_client = pytest.importorskip("prometheus_client", reason=PROMETHEUS_MISSING)
    registry = prometheus_client.CollectorRegistry()
    metrics = GUARD.Metrics(registry)
    modes = {"gpu-a": "healthy", "gpu-b": "nan", "gpu-e": "echo"}
    guard = start_guard(fleet, tmp_path, modes, metrics=metrics, model="default", quiet=True)
    a, b, e = (fleet.replica(n) for n in ("gpu-a", "gpu-b", "gpu-e"))

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    guard.cycle(), guard.cycle()
    assert value("glm5_guard_verdict", replica=a) == 1.0
    assert value("glm5_guard_verdict", replica=b) == 0.0
    assert value("glm5_guard_transitions_total", replica=b, direction="out") == 1.0
    assert value("glm5_guard_transitions_total", replica=a, direction="out") == 0.0
    assert value("glm5_guard_removed", replica=b) == 1.0 and value("glm5_guard_in_router", replica=b) == 0.0
    assert value("glm5_guard_consecutive_failures", replica=b) == 2.0
    assert value("glm5_guard_healthy_replicas") == 1.0 and value("glm5_guard_router_up") == 1.0
    assert value("glm5_guard_held", replica=a) == 0.0 and value("glm5_guard_alerts_total", replica=a) == 0.0
    assert value("glm5_guard_last_check_timestamp_seconds", replica=a) == pytest.approx(time.time(), abs=60)
    assert value("glm5_guard_cycle_seconds") > 0 and value("glm5_guard_last_cycle_timestamp_seconds") > 0
    text = prometheus_client.generate_latest(registry).decode()
    symptoms = re.findall(
        r'glm5_guard_symptom_info\{replica="([^"]+)",symptom="((?:[^"\\]|\\.)*)"\} 1\.0', text
    )
    assert sorted(url for url, _ in symptoms) == [b, e]
    assert all(len(re.sub(r"\\(.)", r"\1", symptom)) <= policy.LABEL_MAX for _, symptom in symptoms)
    assert "Bearer <redacted>" in text  # the echoing replica sent the key back; it was scrubbed
    assert_no_keys(text)

    fleet.modes["gpu-b"] = "healthy"
    (tmp_path / "holds").mkdir()
    (tmp_path / "holds" / "e").write_text(e)
    for _ in range(3):
        guard.cycle()
    text = prometheus_client.generate_latest(registry).decode()
    assert "glm5_guard_symptom_info{" not in text  # no stale label sets
    assert value("glm5_guard_transitions_total", replica=b, direction="in") == 1.0
    assert value("glm5_guard_verdict", replica=e) is None and value("glm5_guard_held", replica=e) == 1.0
    assert value("glm5_guard_healthy_replicas") == 2.0


def test_counters_resume_from_the_saved_state(fleet: Fleet, tmp_path: Path) -> None:
    prometheus_client = pytest.importorskip("prometheus_client", reason=PROMETHEUS_MISSING)
    a = fleet.replica("gpu-a")
    (tmp_path / "state").mkdir()
    saved = {"replicas": {a: {"transitions_out": 4, "transitions_in": 3, "alerts": 7, "verdict": "pass"}}}
    (tmp_path / "state" / "state.json").write_text(json.dumps(saved))
    registry = prometheus_client.CollectorRegistry()
    guard = start_guard(fleet, tmp_path, {"gpu-a": "healthy"}, metrics=GUARD.Metrics(registry), quiet=True)
    guard.cycle(), guard.cycle()
    assert (
        registry.get_sample_value("glm5_guard_transitions_total", {"replica": a, "direction": "out"}) == 4.0
    )
    assert registry.get_sample_value("glm5_guard_alerts_total", {"replica": a}) == 7.0


def test_the_daemon_process_serves_metrics_and_stops_on_sigterm(fleet: Fleet, tmp_path: Path) -> None:
    """The real entry point in a child process: metrics over HTTP (process collectors included), SIGTERM."""
    pytest.importorskip("prometheus_client", reason=PROMETHEUS_MISSING)
    fleet.start({"gpu-a": "healthy"})
    port = free_port()
    path = tmp_path / "guard.json"
    path.write_text(json.dumps(config_for(fleet, tmp_path, ["gpu-a"], interval=1, metrics_port=port)))
    env = {**os.environ, **ENV, "PYTHONPATH": os.pathsep.join([str(MODULE_UTILS), *sys.path])}
    child = subprocess.Popen(
        [sys.executable, str(GUARD_FILE), "--config", str(path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    cycled = re.compile(
        r"^glm5_guard_last_cycle_timestamp_seconds [1-9]", re.MULTILINE
    )  # 0.0 until a cycle ends
    try:
        text = ""
        deadline = time.monotonic() + 20
        while not cycled.search(text) and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                    text = answer.read().decode()
            except OSError:
                continue
        assert cycled.search(text), f"no finished cycle in the metrics: {text[-500:]!r}"
        assert "process_cpu_seconds_total" in text
        assert f'glm5_guard_verdict{{replica="{fleet.replica("gpu-a")}"}} 1.0' in text
        assert_no_keys(text)
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=5)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert "start: 1 replicas" in out and "router_admin_key=set" in out and "stop: SIGTERM" in out
    assert_no_keys(out + err)
