"""The rollout's plan, floor and failure budget run by the real ansible-playbook on the controller, over fake
hosts (local connection) and a fake router on 127.0.0.1: playbooks/rollout.yml's plan play and roll play are
taken verbatim (serial, max_fail_percentage, the plan, batch and budget task files); only staging and the
switch itself are stand-ins (staging says every node has something to change; the switch records its batch,
and a node named to fail is "restored" as restore.yml notes it).

The trap this guards: the batch size given in group_vars made the old plan print [4, 4] while the roll play's
serial, templated before host variables exist, ran 8 batches of 1."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from chat_server import no_proxy as no_proxy  # the autouse fixture: no proxy in this file
from chat_server import serving
from controller_play import ROOT, ansible_playbook
from test_validate_gate_play import ADMIN_KEY, Router

sys.path.insert(0, str(ROOT / "lab" / "bench"))
from controller_scale import stand_in_plays  # the bench's stand-ins for staging

ROLLOUT = yaml.safe_load((ROOT / "playbooks" / "rollout.yml").read_text())
PLAN_PLAY, ROLL_PLAY, END_PLAY = ROLLOUT[1], ROLLOUT[2], ROLLOUT[3]

SWITCH = [
    {
        "name": "Stand-in switch: record the batch",
        "ansible.builtin.debug": {"msg": "RAN {{ ansible_play_batch | join(',') }}"},
        "run_once": True,
    },
    {
        "name": "Stand-in restore (as restore.yml notes a restored replica)",
        "ansible.builtin.set_fact": {
            "sglang_rollout_restored": {
                "replica": "{{ inventory_hostname }}",
                "msg": "Replica {{ inventory_hostname }} failed its switch: stand-in.",
            }
        },
        "when": "inventory_hostname in (fake_fail | default([]))",
    },
]


def playbook(tmp_path: Path) -> Path:
    roll = dict(ROLL_PLAY)
    roll["tasks"] = [
        t if "tasks_from" in t.get("ansible.builtin.include_role", {}) else SWITCH for t in roll["tasks"]
    ]
    roll["tasks"] = [x for t in roll["tasks"] for x in (t if isinstance(t, list) else [t])]
    path = tmp_path / "rollout.yml"
    path.write_text(yaml.safe_dump([*stand_in_plays(), PLAN_PLAY, roll, END_PLAY], sort_keys=False))
    # The role is found from the project (roles_path in ansible.cfg), the playbook sits in tmp_path.
    return path


def run(
    tmp_path: Path, nodes: int, group_vars: dict[str, Any], healthy: int | None = None, extra: list[str] = ()
) -> tuple[Any, Router, list[list[str]], list[str]]:
    router = Router()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    names = [f"n{i}" for i in range(1, nodes + 1)]
    with serving(router.handler()) as router_url:
        for name in names[: nodes if healthy is None else healthy]:
            router.register(f"http://{name}:30000")
        inventory = {
            "all": {
                "children": {
                    "sglang_nodes": {"hosts": {n: local for n in names}, "vars": group_vars},
                    "sglang_router": {
                        "hosts": {
                            "gw": local
                            | {
                                "sglang_router_port": int(router_url.rsplit(":", 1)[1]),
                                "sglang_router_admin_key": ADMIN_KEY,
                            }
                        }
                    },
                }
            }
        }
        (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
        done = ansible_playbook("-i", str(tmp_path / "hosts.yml"), str(playbook(tmp_path)), *extra)
    ran = [m.split(",") for m in re.findall(r'"msg": "RAN ([^"]+)"', done.stdout)]
    printed = re.findall(r'"batch \d+ \((?:canary|batch)\): ([^"]+)"', done.stdout)
    return done, router, ran, printed


@pytest.fixture(autouse=True)
def json_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")


def test_the_batch_size_from_group_vars_is_the_plan_printed_and_the_plan_run(tmp_path: Path) -> None:
    done, _, ran, printed = run(tmp_path, 8, {"sglang_rolling_replicas_per_batch": 4})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert ran == [["n1", "n2", "n3", "n4"], ["n5", "n6", "n7", "n8"]]
    assert [p.split(", ") for p in printed] == ran


def test_a_canary_then_percentage_batches(tmp_path: Path) -> None:
    done, _, ran, printed = run(
        tmp_path,
        8,
        {
            "sglang_rolling_replicas_per_batch": "25%",
            "sglang_rolling_canary": 1,
            "sglang_rolling_min_healthy": "50%",
        },
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert [len(b) for b in ran] == [1, 2, 2, 2, 1]
    assert [p.split(", ") for p in printed] == ran
    assert "(canary)" in done.stdout


def test_a_batch_that_would_break_the_floor_never_leaves(tmp_path: Path) -> None:
    # Two of the eight replicas are healthy in the router; the floor is 2: the first batch (n1, n2) leaves 0.
    done, router, ran, _ = run(
        tmp_path, 8, {"sglang_rolling_replicas_per_batch": 2, "sglang_rolling_min_healthy": 2}, healthy=2
    )
    assert done.returncode != 0
    assert ran == []
    assert (
        "2 replica(s) healthy in the router; the batch takes out 2 of them and leaves 0, under the floor of 2"
        in done.stdout
    )
    assert router.deleted == []


def test_the_failure_budget_lets_the_rollout_go_on_then_stops_it(tmp_path: Path) -> None:
    fails = ["-e", json.dumps({"fake_fail": ["n2", "n5"]})]
    # With --limit, as an operator rolls part of a fleet: localhost is out of the limit, and the run must
    # still end failed, naming the restored replicas.
    within, _, ran, _ = run(
        tmp_path,
        6,
        {"sglang_rolling_failure_budget": 2, "sglang_rolling_min_healthy": 0},
        extra=[*fails, "--limit", "sglang_nodes"],
    )
    assert len(ran) == 6
    assert within.returncode != 0
    assert (
        "2 replica(s) failed their switch and were restored on their previous release, within the failure "
        "budget (2): n2, n5" in within.stdout
    )

    over, _, ran, _ = run(
        tmp_path, 6, {"sglang_rolling_failure_budget": 1, "sglang_rolling_min_healthy": 0}, extra=fails
    )
    assert ran == [["n1"], ["n2"], ["n3"], ["n4"], ["n5"]]
    assert over.returncode != 0
    assert "Rolling update stopped after batch 5: Replica n2 failed its switch: stand-in." in over.stdout
    assert "failure budget 1 (sglang_rolling_failure_budget): the rollout stops here" in over.stdout
    assert "within the failure budget" not in over.stdout


def test_settings_that_differ_between_nodes_stop_the_plan(tmp_path: Path) -> None:
    hosts = tmp_path / "host_vars"
    hosts.mkdir()
    (hosts / "n2.yml").write_text("sglang_rolling_replicas_per_batch: 2\n")
    done, _, ran, _ = run(tmp_path, 3, {"sglang_rolling_replicas_per_batch": 1})
    assert done.returncode != 0 and ran == []
    assert "the rollout's batch_size differs between hosts (n1: 1, n2: 2)" in done.stdout
