"""Module router_workers against a fake smg admin API (the validate gate test's Router) on 127.0.0.1: a list
of workers in and another out in one call, with hold markers, waiting until the router says so; a router that
never drops a worker ends in a failure naming it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import (
    batch_plan,
    batch_waiting,
    hold_name,
)
from chat_server import no_proxy as no_proxy  # the autouse fixture: no proxy in this file
from chat_server import serving
from project_modules import load_module
from test_validate_gate_play import ADMIN_KEY, Router

MODULE = load_module("router_workers")


def run(args: dict[str, Any], capsys: pytest.CaptureFixture[str], check: bool = False) -> dict[str, Any]:
    with patch_module_args({**args, "_ansible_check_mode": check}), pytest.raises(SystemExit) as exited:
        MODULE.main()
    output = json.loads(capsys.readouterr().out)
    output["rc"] = exited.value.code
    return output


def test_a_batch_goes_out_with_holds_then_back_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    router = Router()
    urls = [f"http://n{i}:30000" for i in range(1, 5)]
    for url in urls:
        router.register(url)
    with serving(router.handler()) as base:
        args = {
            "url": base,
            "admin_key": ADMIN_KEY,
            "hold_dir": str(tmp_path),
            "interval": 0.05,
            "timeout": 10,
        }
        dry = run({**args, "absent": urls[:2], "hold": True}, capsys, check=True)
        assert (
            dry["changed"]
            and dry["removed"] == urls[:2]
            and router.deleted == []
            and not list(tmp_path.iterdir())
        )
        out = run({**args, "absent": urls[:2], "hold": True}, capsys)
        assert out["rc"] == 0 and out["changed"] and out["removed"] == urls[:2], out
        assert router.registered() == set(urls[2:])
        assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
            hold_name(u): u + "\n" for u in urls[:2]
        }
        again = run({**args, "absent": urls[:2], "hold": True}, capsys)
        assert again["rc"] == 0 and not again["changed"], again
        back = run({**args, "present": urls[:2]}, capsys)
        assert back["rc"] == 0 and back["added"] == urls[:2] and sorted(back["held"]) == urls[:2], back
        assert router.registered() == set(urls) and not list(tmp_path.iterdir())


class StuckRouter(Router):
    """A router that accepts the DELETE and keeps the worker listed and ready: it never drains."""

    def handler(self) -> type:
        base = super().handler()
        router = self

        class Handler(base):  # type: ignore[misc, valid-type]
            def do_DELETE(self) -> None:
                router.deleted.append(self.path)
                self.reply(202, b'{"status": "accepted"}')

        return Handler


def test_a_worker_the_router_never_drops_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    router = StuckRouter()
    router.register("http://n1:30000")
    with serving(router.handler()) as base:
        args = {
            "url": base,
            "absent": ["http://n1:30000"],
            "timeout": 0,
            "interval": 0.05,
            "hold_dir": str(tmp_path),
        }
        refused = run({**args, "admin_key": "wrong-key"}, capsys)
        assert refused["rc"] == 1 and "GET " in refused["msg"] and "401" in refused["msg"], refused
        stuck = run({**args, "admin_key": ADMIN_KEY}, capsys)
        assert stuck["rc"] == 1 and len(router.deleted) == 1, stuck
        assert stuck["msg"].endswith("where they should be (gone): http://n1:30000"), stuck["msg"]


def test_the_plan_and_the_wait_from_a_listing() -> None:
    listing = {
        "workers": [
            {"id": "a", "url": "http://n1:30000", "is_healthy": True, "status": "ready"},
            {"id": "b", "url": "http://n2:30000/", "is_healthy": True, "status": "draining"},
            {"id": "c", "url": "http://n3:30000", "is_healthy": False, "status": "ready"},
        ]
    }
    plan = batch_plan(listing, ["http://n3:30000", "http://n4:30000"], ["http://n2:30000", "http://n9:30000"])
    assert plan == {"add": ["http://n4:30000"], "remove": [{"id": "b", "url": "http://n2:30000"}]}
    assert batch_waiting(listing, ["http://n1:30000", "http://n3:30000"], ["http://n2:30000"]) == [
        "http://n3:30000",
        "http://n2:30000",
    ]
    with pytest.raises(ValueError, match="in and taken out at once: http://n1:30000"):
        batch_plan(listing, ["http://n1:30000/"], ["http://n1:30000"])
