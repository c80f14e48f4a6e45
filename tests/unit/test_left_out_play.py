"""roles/preflight/tasks/left_out.yml run by the real ansible-playbook on the controller over fake hosts: a
node that failed its checks (its reason noted) and one that failed without a reason (as an unreachable node
does) are named and left out within preflight_node_failure_budget while the others go on; past it every node
stops."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml
from controller_play import ansible_playbook

PLAY = [
    {
        "name": "Checks that fail on two nodes",
        "hosts": "sglang_nodes",
        "gather_facts": False,
        "tasks": [
            {
                "name": "A check that fails on n2, its reason noted (as preflight.yml's rescue notes it)",
                "block": [
                    {
                        "name": "Check",
                        "ansible.builtin.assert": {
                            "that": "inventory_hostname != 'n2'",
                            "fail_msg": "n2 has 4 GPU(s)",
                        },
                    }
                ],
                "rescue": [
                    {
                        "name": "Note why",
                        "ansible.builtin.set_fact": {
                            "glm5_left_out": "preflight: {{ ansible_failed_result.msg }}"
                        },
                    }
                ],
            },
            {
                "name": "A failure with no reason noted on n3 (as an unreachable node has none)",
                "ansible.builtin.fail": {"msg": "gone"},
                "when": "inventory_hostname == 'n3'",
            },
            {
                "name": "Leave them out, or stop everything",
                "ansible.builtin.include_role": {"name": "preflight", "tasks_from": "left_out.yml"},
            },
            {"name": "Go on", "ansible.builtin.debug": {"msg": "WENT ON {{ inventory_hostname }}"}},
        ],
    }
]


@pytest.fixture(autouse=True)
def json_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")  # a message on one line


def run(tmp_path: Path, budget: object) -> tuple[int, str]:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"children": {"sglang_nodes": {"hosts": {f"n{i}": local for i in range(1, 6)}}}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(PLAY, sort_keys=False))
    done = ansible_playbook(
        "-i",
        str(tmp_path / "hosts.yml"),
        str(tmp_path / "play.yml"),
        "-e",
        json.dumps({"preflight_node_failure_budget": budget}),
    )
    return done.returncode, done.stdout


def test_within_the_budget_the_failed_nodes_are_left_out_and_the_others_go_on(tmp_path: Path) -> None:
    rc, out = run(tmp_path, "40%")  # 2 of 5
    assert rc == 2, out[-3000:]
    assert (
        "2 of 5 node(s) left out of this run (n2: preflight: n2 has 4 GPU(s); n3: unreachable, or failed"
        in out
    )
    assert "n2 is left out of the rest of this run: preflight: n2 has 4 GPU(s)" in out
    assert sorted(set(re.findall(r"WENT ON (n\d)", out))) == ["n1", "n4", "n5"]


def test_past_the_budget_every_node_stops(tmp_path: Path) -> None:
    rc, out = run(tmp_path, 1)
    assert rc == 2 and "WENT ON" not in out, out[-3000:]
    assert "Preflight stopped the run: 2 of 5 node(s) failed, more than the budget of 1" in out
    assert "Nothing was changed on any node's service in this run" in out
