"""model_checkpoint_concurrent_downloads: the role's real fetch tasks (roles/model_checkpoint/tasks/fetch.yml)
on three fake nodes (the local connection, each its own directory), copying a small checkpoint from a source
directory. Bounded to one, each job waits for the slot the node before it gave back: the waits climb by at
least the poll interval, node after node. Unbounded, no job waits for a slot at all."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from controller_play import ansible_playbook

NODES = ("n1", "n2", "n3")
POLL = 1


def playbook(tmp_path: Path, concurrent: int) -> tuple[Path, Path, Path]:
    """The inventory, the playbook, and the file the play writes each node's result to."""
    source = tmp_path / "source"
    source.mkdir(exist_ok=True)
    (source / "config.json").write_text('{"model_type": "gpt2"}\n')
    (source / "model.safetensors").write_bytes(b"\0" * 4096)
    interpreter = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {n: {**interpreter, "model_checkpoint_local_dir": str(tmp_path / n / "model")} for n in NODES}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"sglang_nodes": {"hosts": hosts}}}}))
    out = tmp_path / "slots.json"
    play = [
        {
            "name": "Fetch on every fake node",
            "hosts": "sglang_nodes",
            "gather_facts": False,
            "vars": {
                "model_checkpoint_revision": "source",
                "model_checkpoint_source_path": str(source),
                "model_checkpoint_concurrent_downloads": concurrent,
                "model_checkpoint_poll_interval": POLL,
                "model_checkpoint_min_free_margin_gb": 0,
                # What tools.yml finds on a node with the tool venv: this interpreter's venv.
                "model_checkpoint_tool_check": {"rc": 0},
                "model_checkpoint_tool_venv": str(Path(sys.executable).parent.parent),
            },
            "tasks": [
                {
                    "name": "The role's fetch",
                    "ansible.builtin.include_role": {"name": "model_checkpoint", "tasks_from": "fetch.yml"},
                },
                {
                    "name": "Keep each node's result",
                    "ansible.builtin.copy": {
                        "content": "{{ dict(ansible_play_hosts | zip(ansible_play_hosts"
                        " | map('extract', hostvars, 'model_checkpoint_result'))) | to_json }}",
                        "dest": str(out),
                        "mode": "0644",
                    },
                    "delegate_to": "localhost",
                    "run_once": True,
                },
            ],
        }
    ]
    book = tmp_path / "fetch.yml"
    book.write_text(yaml.safe_dump(play, sort_keys=False))
    return inventory, book, out


@pytest.mark.parametrize("concurrent", [1, 0])
def test_fetches_wait_for_their_slot_when_bounded(tmp_path: Path, concurrent: int) -> None:
    inventory, book, out = playbook(tmp_path, concurrent)
    done = ansible_playbook("-i", str(inventory), str(book))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert set(results) == set(NODES)
    for node, result in results.items():
        assert result["verified"] and result["downloaded_files"], (node, result)
        assert not list((tmp_path / node / "model" / ".cache" / "glm5-deploy").glob("slot-*")), node
    if concurrent == 0:
        assert all("slot" not in result["timings"] for result in results.values()), results
        return
    waits = sorted(result["timings"]["slot"] for result in results.values())
    # The first node's slot comes at its task's first look; each next node's only once the node before it
    # ended its wait task, whose second look comes a poll interval after the first.
    assert waits[0] < waits[1] - 0.8 * POLL and waits[1] < waits[2] - 0.8 * POLL, waits
