"""Faults injected into the running lab: each is detected, the play fails on that host with the symptom in
words and the journal, and nothing else is damaged. The lab is put back as it was found: the rollout test
restores its node itself; the victim of the crash loop and the stalled start is restored once, after both.

The other faults of the suite run elsewhere, on real data too: the NaN model through site.yml in
test_serving_safety.py and the Inf model in molecule/validate; a download killed mid-way and resumed, a
corrupted and a truncated shard, and a full disk in molecule/checkpoint; a bad release caught mid-rollout in
molecule/rollback.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import LAB_NODES, ROOT, Run, lab, router_workers

VICTIM = "gpu-node-3"
MODELS = "/var/lib/sglang/models"
# The second node of the victim's two-node replica in test_stalled_start_times_out_with_the_journal: an
# inventory host that does not exist, so it never joins the rendezvous. No play runs on it (--limit VICTIM).
ABSENT_PEER = "gpu-node-3-absent-peer"


def stalled_replica_inventory(tmp_path: Path) -> Path:
    """The lab's inventory with VICTIM as rank 0 of a two-node replica (group sglang_replica_stall, VICTIM
    first) whose other node does not exist. The roles render --nnodes 2 --node-rank 0 --dist-init-addr
    VICTIM:20000 from it (sglang_server_advertise_host, sglang_server_dist_port), as for a real replica."""
    doc = yaml.safe_load((ROOT / "inventory" / "lab" / "hosts.yml").read_text())
    children = doc["all"]["children"]
    children["sglang_nodes"]["hosts"][ABSENT_PEER] = {"ansible_host": "glm5-lab-absent-peer"}
    children["sglang_replica_stall"] = {"hosts": {VICTIM: None, ABSENT_PEER: None}}
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    # Not sorted: a replica's hosts are ranked in the group's order.
    (inventory / "hosts.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (inventory / "group_vars").symlink_to(ROOT / "inventory" / "lab" / "group_vars")
    return inventory


def node_state(adhoc: Callable[..., dict[str, dict[str, Any]]]) -> dict[str, tuple[str, str, str]]:
    """(current release, unit sha256, server PID) of every lab node."""
    shown = adhoc(
        "sglang_nodes",
        "ansible.builtin.shell",
        "readlink /opt/sglang/current; sha256sum /etc/systemd/system/sglang.service | cut -d' ' -f1; "
        "systemctl show sglang -p MainPID --value",
    )
    return {host: tuple(res["stdout_lines"]) for host, res in shown.items()}


def unit_sha(host: str) -> str:
    """The sha256 of a lab node's sglang unit, read directly (the play is running meanwhile)."""
    shown = subprocess.run(
        ["podman", "exec", f"glm5-lab-{host}", "sha256sum", "/etc/systemd/system/sglang.service"],
        capture_output=True,
        text=True,
        check=True,
    )
    return shown.stdout.split()[0]


def failure(run: Run, host: str) -> str:
    """The failure messages of ``host`` in the run."""
    return "\n".join(
        str(e["event_data"]["res"].get("msg", ""))
        for e in run.events
        if e.get("event") in ("runner_on_failed", "runner_on_unreachable")
        and e["event_data"].get("host") == host
    )


def test_a_node_stopped_mid_rollout_stops_the_rollout(run_playbook, adhoc) -> None:
    """gpu-node-2 freezes (podman pause: every exec into it fails) while gpu-node-1 switches: the rollout
    stops at gpu-node-2 and gpu-node-3 is never touched. Then gpu-node-2 resumes and gpu-node-1 goes back to
    the inventory's unit."""
    import ansible_runner
    from conftest import ROOT

    before = node_state(adhoc)
    update = {"sglang_settings": {"max_running_requests": 3}}
    private = ROOT / ".ansible" / "fault-rollout"
    subprocess.run(["rm", "-rf", str(private)], check=True)
    private.mkdir(parents=True)
    thread, runner = ansible_runner.run_async(
        private_data_dir=str(private),
        project_dir=str(ROOT),
        playbook=str(ROOT / "playbooks" / "rolling_update.yml"),
        inventory=str(ROOT / "inventory" / "lab"),
        extravars=update,
        envvars={
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            # Only waits for the failure: the frozen node is unreachable after 10 s of keepalives instead of
            # ansible.cfg's 60 s, and its reconnects are not retried 3 times. Its own control sockets, so
            # that the masters other runs opened with ansible.cfg's keepalives are not reused.
            "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=5 "
            "-o ServerAliveCountMax=2",
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(private / "cp"),
            "ANSIBLE_SSH_RETRIES": "0",
            "ANSIBLE_TIMEOUT": "10",
        },
        quiet=True,
    )
    paused = False
    try:
        # gpu-node-1 has its new unit (its switch is under way): freeze the next node before its batch.
        deadline = time.monotonic() + 900
        while thread.is_alive() and time.monotonic() < deadline:
            if unit_sha("gpu-node-1") != before["gpu-node-1"][1]:
                subprocess.run(["podman", "pause", "glm5-lab-gpu-node-2"], check=True)
                paused = True
                break
            time.sleep(1)
        thread.join(timeout=900)
        assert paused, "gpu-node-1 never finished its switch"
        assert runner.status == "failed", runner.status
        events = list(runner.events)
        lost = [
            e
            for e in events
            if e.get("event") in ("runner_on_unreachable", "runner_on_failed")
            and e["event_data"].get("host") == "gpu-node-2"
        ]
        assert lost, "the frozen node was not reported"
        # Staging compared gpu-node-3's files in check mode; no switch task ever ran for it.
        touched = [
            e["event_data"].get("task")
            for e in events
            if e["event_data"].get("host") == "gpu-node-3"
            and e["event_data"].get("play") == "Roll the update through the replicas"
            and e.get("event", "").startswith("runner_on_")
        ]
        assert not touched, f"gpu-node-3 was switched: {touched}"
        subprocess.run(["podman", "unpause", "glm5-lab-gpu-node-2"], check=True)
        paused = False
        after = node_state(adhoc)
        assert after["gpu-node-3"] == before["gpu-node-3"]
        assert after["gpu-node-2"] == before["gpu-node-2"]
        assert after["gpu-node-1"][1] != before["gpu-node-1"][1], "gpu-node-1 was switched before the freeze"
    finally:
        if paused:
            subprocess.run(["podman", "unpause", "glm5-lab-gpu-node-2"], check=True)
        # gpu-node-1 back to the inventory's unit through the same rolling path, and the router's workers to
        # the inventory (gpu-node-2 stayed registered; this proves it is healthy again).
        back = run_playbook("playbooks/rolling_update.yml", cmdline="--limit gpu-node-1")
        router = run_playbook("playbooks/router.yml")
    assert back.status == "successful", back.stats
    assert router.status == "successful", router.stats
    # The restore put the inventory's unit back (rolling_update.yml proved it with the inference check); the
    # update's unit is gone. (Compared with the update's unit, not the one before: a lab left by another
    # scenario, e.g. molecule rollback, may not have matched the inventory before this test.)
    assert node_state(adhoc)["gpu-node-1"][1] != after["gpu-node-1"][1]


GPU_FIXTURE = "/etc/glm5-lab/gpu-fixture.json"


def test_a_node_that_lost_a_gpu_is_refused_before_it_leaves_the_router(run_playbook, adhoc) -> None:
    """Every lab node's nvidia-smi now lists 7 of the 8 GPUs preflight recorded (the last one gone from its
    list and its topology): a rolling update with a real change refuses the first replica before it leaves
    the router. Every node keeps its release, unit and server process, and every replica stays in the
    router."""
    before = node_state(adhoc)
    script = (
        "import json, sys; d = json.load(open(sys.argv[1])); d['gpus'].pop(); "
        "links = d['topology']['links']; links.pop(); [row.pop() for row in links]; "
        "json.dump(d, open(sys.argv[1], 'w'))"
    )
    drop_one = f'cp {GPU_FIXTURE} {GPU_FIXTURE}.full && python3 -c "{script}" {GPU_FIXTURE}'
    update = {"sglang_settings": {"max_running_requests": 3}}
    try:
        for host in LAB_NODES:
            lab(host, drop_one)
        run = run_playbook("playbooks/rolling_update.yml", extravars=update)
    finally:
        for host in LAB_NODES:
            lab(host, f"test ! -e {GPU_FIXTURE}.full || mv {GPU_FIXTURE}.full {GPU_FIXTURE}")
    assert run.status == "failed", run.stats
    refused = run.results("Refuse a node that lost a GPU since it was deployed", "runner_on_failed")
    assert len(refused) == 1, failure(run, "gpu-node-1") or run.stats
    ((host, res),) = refused.items()
    assert "sees 7 GPU(s)" in res["msg"] and "was not taken out of the router" in res["msg"], res["msg"]
    assert res["msg"].startswith(host), res["msg"]
    drained = [e for e in run.events if e["event_data"].get("task", "").startswith("Take the replica out")]
    assert not drained, "a replica was taken out of the router"
    assert node_state(adhoc) == before
    workers = router_workers()
    assert all(workers.get(f"http://{h}:30000", {}).get("is_healthy") for h in LAB_NODES), workers


@pytest.fixture(scope="module")
def restore_victim(run_playbook, adhoc) -> Iterator[dict[str, tuple[str, str, str]]]:
    """The nodes' state before the victim's faults. After the last of them (one restart, not one per fault)
    the victim is served from the inventory again, proven and back in the router (serve.yml validates)."""
    before = node_state(adhoc)
    yield before
    adhoc(VICTIM, "ansible.builtin.shell", "systemctl kill -s KILL sglang || true")
    restored = run_playbook("playbooks/serve.yml", cmdline=f"--limit {VICTIM}")
    assert restored.status == "successful", restored.stats
    # serve.yml alone names the release in ExecStart, as site.yml does (not the current link): the unit it
    # wrote through the link made the next site.yml rewrite it and restart the victim.
    unit = lab(VICTIM, "cat /etc/systemd/system/sglang.service").stdout
    current = lab(VICTIM, "readlink -f /opt/sglang/current").stdout.strip()
    assert f"ExecStart={current}/venv/bin/python " in unit, unit


def test_crash_loop_is_reported_with_the_journal(restore_victim, run_playbook, adhoc) -> None:
    """A bad model path: the server dies at start and systemd restarts it; the wait ends on the second restart
    (sglang_server_crash_restarts), long before the health timeout, and the play says so with the journal."""
    run = run_playbook(
        "playbooks/serve.yml",
        extravars={
            "sglang_server_model_path": f"{MODELS}/no-such-model",
            # Far above the two restarts' minute (RestartSec=10 after a failed start of about 15 s): only the
            # crash-loop verdict can end the wait in time for the message below.
            "sglang_server_health_timeout": 300,
        },
        cmdline=f"--limit {VICTIM}",
    )
    assert run.status == "failed"
    message = failure(run, VICTIM)
    assert "did not become healthy: a crash loop" in message, message[:3000]
    assert "Last journal lines" in message and "no-such-model" in message, message[-3000:]
    after = node_state(adhoc)
    for host in LAB_NODES:
        if host != VICTIM:
            assert after[host] == restore_victim[host], host


def test_stalled_start_times_out_with_the_journal(
    restore_victim, run_playbook, adhoc, tmp_path: Path
) -> None:
    """Rank 0 of a two-node replica whose second node never joins: the real sglang waits in its
    torch.distributed rendezvous, runs without restarts and never becomes healthy; the play times out and
    says the start stalled. The replica is the inventory's (a sglang_replica_* group): nnodes, node_rank and
    dist_init_addr belong to the roles, and sglang_settings may not set them."""
    run = run_playbook(
        "playbooks/serve.yml",
        extravars={
            # One rank per node: tp_size 2 over the replica's two nodes.
            "sglang_settings": {"tp_size": 2},
            # sglang's CPU backend runs one rank per bound core set with tp > 1.
            "sglang_server_environment": {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"},
            "sglang_server_health_timeout": 60,
        },
        cmdline=f"--limit {VICTIM}",
        inventory=stalled_replica_inventory(tmp_path),
    )
    assert run.status == "failed"
    message = failure(run, VICTIM)
    assert "stalled start" in message and "Last journal lines" in message, message[:3000]
    after = node_state(adhoc)
    for host in LAB_NODES:
        if host != VICTIM:
            assert after[host] == restore_victim[host], host
