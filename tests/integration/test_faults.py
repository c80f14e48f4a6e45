"""Faults injected into the running lab: each is detected, the play fails on that host with the symptom in
words and the journal, and nothing else is damaged. The lab is put back as it was found: the rollout test
restores its node itself; the victim of the crash loop and the stalled start is restored once, after both.

The other faults of the suite run elsewhere, on real data too: the NaN model through site.yml in
test_serving_safety.py and the Inf model in molecule/validate; a download killed mid-way and resumed, a
corrupted and a truncated shard, and a full disk in molecule/checkpoint; a bad release caught mid-rollout in
molecule/rollback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import (
    LAB_NODES,
    NAN_NODE,
    NAN_NODE_LEFT_BROKEN,
    ROOT,
    RUNNER_ENV,
    Run,
    lab,
    leaks,
    nan_node_restored_later,
    node_url,
    restore_nan_node,
    router_workers,
)

# The node of the crash loop and the stalled start: the NaN tests' node, so that one restart restores it.
VICTIM = NAN_NODE
MODELS = "/var/lib/sglang/models"
# The second node of the victim's two-node replica in test_stalled_start_times_out_with_the_journal: an
# inventory host that does not exist, so it never joins the rendezvous. No play runs on it (--limit VICTIM).
# Its address is one of the lab network's that no container has: the victim's host firewall lets its peer in
# by address (a peer name that does not resolve is refused before the firewall changes).
ABSENT_PEER = "gpu-node-3-absent-peer"
ABSENT_PEER_ADDRESS = "10.89.42.254"


def stalled_replica_inventory(tmp_path: Path) -> Path:
    """The lab's inventory with VICTIM as rank 0 of a two-node replica (group sglang_replica_stall, VICTIM
    first) whose other node does not exist. The roles render --nnodes 2 --node-rank 0 --dist-init-addr
    VICTIM:20000 from it (sglang_server_advertise_host, sglang_server_dist_port), as for a real replica."""
    doc = yaml.safe_load((ROOT / "inventory" / "lab" / "hosts.yml").read_text())
    children = doc["all"]["children"]
    children["sglang_nodes"]["hosts"][ABSENT_PEER] = {
        "ansible_host": "glm5-lab-absent-peer",
        "sglang_server_advertise_host": ABSENT_PEER_ADDRESS,
    }
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


def failure(run: Run, host: str) -> str:
    """The failure messages of ``host`` in the run."""
    return "\n".join(
        str(e["event_data"]["res"].get("msg", ""))
        for e in run.events
        if e.get("event") in ("runner_on_failed", "runner_on_unreachable")
        and e["event_data"].get("host") == host
    )


ROLL_PLAY = "Roll the update through the replicas"
# The task of sglang_server that writes a node's unit (a changed result: the node has its new unit).
UNIT_TASK = "Install the systemd unit"
FREEZE_UPDATE = {"sglang_settings": {"max_running_requests": 3}}


def rollout_with_a_frozen_node(name: str, node: str, freeze_when: Callable[[dict[str, Any]], bool]) -> tuple:
    """rolling_update.yml with FREEZE_UPDATE (every node's unit changes), in the background; ``node`` freezes
    (podman pause: every exec into it fails) at the run's first event that ``freeze_when`` accepts, and
    resumes once the run has ended. The run's status, its events, and the nodes' Roll-play events by host."""
    import ansible_runner

    private = ROOT / ".ansible" / name
    subprocess.run(["rm", "-rf", str(private)], check=True)
    private.mkdir(parents=True)
    frozen = threading.Event()

    def freeze(event: dict[str, Any]) -> bool:
        if not frozen.is_set() and freeze_when(event):
            subprocess.run(["podman", "pause", f"glm5-lab-{node}"], check=True)
            frozen.set()
        return True

    thread, runner = ansible_runner.run_async(
        private_data_dir=str(private),
        project_dir=str(ROOT),
        playbook=str(ROOT / "playbooks" / "rolling_update.yml"),
        inventory=str(ROOT / "inventory" / "lab"),
        extravars=FREEZE_UPDATE,
        envvars={
            **RUNNER_ENV,
            # Only waits for the failure: the frozen node is unreachable after 10 s of keepalives instead of
            # ansible.cfg's 60 s, and its reconnects are not retried 3 times. Its own control sockets, so
            # that the masters other runs opened with ansible.cfg's keepalives are not reused.
            "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=5 "
            "-o ServerAliveCountMax=2",
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(private / "cp"),
            "ANSIBLE_SSH_RETRIES": "0",
            "ANSIBLE_TIMEOUT": "10",
        },
        event_handler=freeze,
        quiet=True,
    )
    try:
        thread.join(timeout=900)
    finally:
        if frozen.is_set():
            subprocess.run(["podman", "unpause", f"glm5-lab-{node}"], check=True)
    assert not thread.is_alive(), "the rollout did not end"
    assert frozen.is_set(), f"{node} was never frozen"
    events = list(runner.events)
    rolled: dict[str, list[str]] = {}
    for e in events:
        host = e["event_data"].get("host")
        if host and e["event_data"].get("play") == ROLL_PLAY and e.get("event", "").startswith("runner_on_"):
            rolled.setdefault(host, []).append(e["event_data"].get("task"))
    return runner.status, events, rolled


def lost(events: list[dict[str, Any]], host: str) -> bool:
    """Whether the run reported ``host`` unreachable or failed."""
    return any(
        e.get("event") in ("runner_on_unreachable", "runner_on_failed")
        and e["event_data"].get("host") == host
        for e in events
    )


def test_a_node_stopped_mid_rollout_stops_the_rollout(run_playbook, adhoc) -> None:
    """Two rollouts of the same update on the two lab nodes, each with a node frozen (podman pause) before its
    batch. First gpu-node-1 freezes as the roll begins: the rollout stops there and gpu-node-2 is never
    touched, and neither node changed. Then gpu-node-2 freezes while gpu-node-1 switches: gpu-node-1 keeps
    its switch, the rollout stops at gpu-node-2, which is unchanged. Then gpu-node-2 resumes; gpu-node-1
    goes back to the inventory's unit in the next tests."""
    first, second = LAB_NODES[:2]
    before = node_state(adhoc)
    try:
        status, events, rolled = rollout_with_a_frozen_node(
            "fault-rollout-first",
            first,
            lambda e: e.get("event") == "playbook_on_play_start" and e["event_data"].get("play") == ROLL_PLAY,
        )
        assert status == "failed", status
        assert lost(events, first), "the frozen node was not reported"
        # Staging compared the other node's files in check mode; no switch task ever ran for it (the frozen
        # node's own events in the roll play prove the play is the one named).
        assert first in rolled and second not in rolled, rolled
        assert node_state(adhoc) == before
        began = lab(first, f"test -e {SWITCH_RECORD}", check=False).returncode == 0
        assert not began, f"{first} froze after its switch began: the test's freeze came too late"

        # gpu-node-1 has its new unit (its switch is under way): freeze the next node before its batch. The
        # event says so by itself (the unit task's changed result on gpu-node-1); reading the unit at every
        # event instead was a podman exec per event, which made the handler lag behind the run.
        status, events, rolled = rollout_with_a_frozen_node(
            "fault-rollout-second",
            second,
            lambda e: (
                e.get("event") == "runner_on_ok"
                and e["event_data"].get("host") == first
                and e["event_data"].get("play") == ROLL_PLAY
                and e["event_data"].get("task") == UNIT_TASK
                and e["event_data"].get("res", {}).get("changed") is True
            ),
        )
        assert status == "failed", status
        assert lost(events, second) and second in rolled, "the frozen node was not reported"
        after = node_state(adhoc)
        assert after[second] == before[second]
        assert after[first][1] != before[first][1], f"{first} was switched before the freeze"
    finally:
        # The router's workers to the inventory (the frozen nodes stayed registered, or the guard took them
        # out meanwhile; this proves they are healthy again). gpu-node-1 stays on the update: the next tests
        # take it back to the inventory's unit.
        router = run_playbook("playbooks/router.yml")
    assert router.status == "successful", router.stats


# The node of the failed-restore and interrupted-rollout tests, and the files that tell where it stands.
ROLLED = "gpu-node-1"
ROLLED_URL = f"http://{ROLLED}:30000"
SWITCH_RECORD = "/var/lib/glm5-rollout/switch.json"
HOLDS = "/var/lib/sglang-router/holds"
FAULT_DROPIN = "/etc/systemd/system/sglang.service.d/99-lab-fault.conf"


def no_key_in(*texts: str) -> None:
    """No lab secret in the output of a run at -vvv (the security suite's rule, on the failure paths here:
    a failed restore, runs interrupted by Ctrl-C or killed, the lock's refusal and its release)."""
    for text in texts:
        assert len(text) > 10_000, "the -vvv output is missing"
        assert leaks(text) == [], leaks(text)


def held(url: str) -> bool:
    """Whether the router host holds ``url`` out (a rolling update's hold marker, which the guard obeys)."""
    return lab("lab-gateway", f"grep -rlx '{url}' {HOLDS}", check=False).returncode == 0


def test_a_restore_that_fails_leaves_the_replica_out_and_says_so(run_playbook) -> None:
    """Every start of the server on gpu-node-1 fails (a lab drop-in: ExecStartPre=/bin/false), so the update's
    start fails and so does the restore's. The play names the replica as out of the router, on which release
    and why; the router has it out and held, and the node keeps the switch's record for the next run."""
    update = {"sglang_settings": {"max_running_requests": 2}}
    release = lab(ROLLED, "basename $(readlink /opt/sglang/current)").stdout.strip()
    lab(
        ROLLED,
        f"mkdir -p {Path(FAULT_DROPIN).parent} && "
        f"printf '[Service]\\nExecStartPre=/bin/false\\n' > {FAULT_DROPIN}"
        " && systemctl daemon-reload",
    )
    try:
        run = run_playbook(
            "playbooks/rolling_update.yml", extravars=update, cmdline=f"--limit {ROLLED}", verbosity=3
        )
    finally:
        # The unit stays stopped, as the failed restore left it: without the stop, systemd's pending automatic
        # restart (Restart=always) would start a server that nobody asked for once the fault is gone, and
        # the next test's switch would stop it again (a whole start of CPU beside that test's runs).
        lab(ROLLED, f"rm -f {FAULT_DROPIN} && systemctl daemon-reload && systemctl stop sglang")
    assert run.status == "failed", run.stats
    no_key_in(run.stdout, json.dumps(run.events))
    message = run.results("Stop the rollout", "runner_on_failed")[ROLLED]["msg"]
    assert f"The restore to release {release} failed too" in message, message
    # Both starts failed, each named with systemd's words: the update's and the restore's (a restart, or a
    # start when systemd's start limit has already left the unit failed).
    assert len(re.findall(r"Unable to (?:re)?start service sglang", message)) == 2, message
    assert "is OUT of the router and held out" in message and f"left on release {release}" in message, message
    assert "run the same command again" in message, message
    # What an AWX job keeps (set_stats): the replica, its outcome and why.
    published = run.custom_stats()["glm5_rollout"][ROLLED]
    assert published["outcome"] == "restore failed", published
    assert "Unable to restart service sglang" in published["symptom"], published
    assert ROLLED_URL not in router_workers(), "the router still routes to the replica it names as out"
    assert held(ROLLED_URL), "the replica is out but not held: the guard could put it back unproven"
    assert lab(ROLLED, f"test -s {SWITCH_RECORD}", check=False).returncode == 0, "the switch's record is gone"


# Where the interrupted-rollout test stops ansible-playbook: a task banner, and the signal it sends to
# ansible-playbook's process group (SIGINT is an operator's Ctrl-C, SIGKILL a lost session or a killed
# control node).
INTERRUPTIONS = (
    ("before the drain", "TASK [Take the batch's replicas out of the router", signal.SIGINT),
    (
        "after the switch, while the server starts",
        "TASK [sglang_server : Wait until /health_generate",
        signal.SIGKILL,
    ),
    ("during the inference check", "TASK [sglang_validate : Ask the model the probes", signal.SIGINT),
    (
        "during re-registration",
        "TASK [sglang_router : Put the replicas into the router and wait until it reports them healthy",
        signal.SIGKILL,
    ),
)
PLAYBOOK_BIN = str(ROOT / ".venv" / "bin" / "ansible-playbook")
LOCK = "/var/lib/glm5-deploy/fleet.lock"


# How long an operator waits after Ctrl-C before pressing it again. ansible-core 2.19 does not always stop at
# the first one (ansible/ansible#86078): a SIGINT that lands while the controller forks a worker is swallowed
# (the run goes on), and one that kills a worker while it writes its result leaves the controller waiting
# forever on the results queue. Its handler is then back to the default, so a second Ctrl-C ends the process
# at once, before the callback can release the fleet lock. A heeded Ctrl-C says "User interrupted execution"
# within a second; 4 s, not 10: a swallowed one at the inference check let the rest of that run (the probes'
# answers, the routing) end in under 10 s with rc 0 in a make test rehearsal, and the test failed on it.
AGAIN_AFTER_S = 4
RELEASED = "Released the fleet lock on lab-gateway (the run ended early)"


def playbook(
    argv: list[str],
    banner: str = "",
    sig: signal.Signals = signal.SIGINT,
    meanwhile: Callable[[], None] | None = None,
) -> tuple[int, str]:
    """Run ansible-playbook (``argv``) to its end, or, with a ``banner``, call ``meanwhile`` and then send
    ``sig`` to its process group at the first line that starts with the banner. The run is held (SIGSTOP: its
    PID alive, its fleet lock held, its tasks going no further) while ``meanwhile`` runs, so that the signal
    lands where the banner says, not after what the run did meanwhile. A SIGINT is sent once more,
    as an operator would press Ctrl-C again, when the run has not said "User interrupted execution"
    AGAIN_AFTER_S seconds later. Returns the exit code and the whole output (after a signal, up to the end of
    the interrupted process)."""
    # Unbuffered: ansible-playbook's output into a pipe is block-buffered, so a banner would arrive late.
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines, sent, stuck = [], False, []
    stopping = threading.Event()

    def kill(why: str) -> None:
        if proc.poll() is None:
            stuck.append(why)
            os.killpg(proc.pid, signal.SIGKILL)

    def again() -> None:
        if proc.poll() is None and not stopping.is_set():
            lines.append(
                f"[test] Ctrl-C again: no 'User interrupted execution' {AGAIN_AFTER_S} s after the first\n"
            )
            os.killpg(proc.pid, signal.SIGINT)

    # A run that never ends (or never ends after the signal) is killed, and the test fails saying so.
    watchdogs = [threading.Timer(1200, kill, ("the run took over 20 minutes",))]
    watchdogs[0].start()
    try:
        for line in proc.stdout:
            lines.append(line)
            if "User interrupted execution" in line:
                stopping.set()
            if banner and not sent and line.startswith(banner):
                if meanwhile:
                    os.killpg(proc.pid, signal.SIGSTOP)
                    meanwhile()
                os.killpg(proc.pid, sig)
                if meanwhile:
                    # A SIGKILL ended the held processes already; any other signal is delivered now.
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGCONT)
                sent = True
                if sig == signal.SIGINT:
                    watchdogs.append(threading.Timer(AGAIN_AFTER_S, again))
                watchdogs.append(threading.Timer(120, kill, (f"it did not exit within 120 s of {sig.name}",)))
                for timer in watchdogs[1:]:
                    timer.start()
        proc.wait()
    finally:
        for timer in watchdogs:
            timer.cancel()
    out = "".join(lines)
    assert not stuck, f"ansible-playbook was killed: {stuck[0]}; its output ended with:\n{out[-6000:]}"
    assert sent or not banner, f"the run ended (rc {proc.returncode}) before {banner!r}:\n{out[-4000:]}"
    return proc.returncode, out


def refused_while_held(refused: list[tuple[int, str]]) -> None:
    """The second rollout, run while the first was held (SIGSTOP) with the fleet lock: refused, naming the
    first, after it saw the first's lease renewed (the held run's renewer, in a session of its own, lives on;
    the lab's lease is 60 s, renewed every 15 s), and it drained nothing."""
    ((rc, out),) = refused
    no_key_in(out)
    assert rc != 0 and "The fleet lock on lab-gateway" in out and "is held by" in out, out[-3000:]
    assert "renewed its lease while this one watched it: it is alive" in out, out[-3000:]
    assert f"rolling_update.yml --limit {ROLLED}" in out, out[-3000:]
    assert "Take the batch's replicas out of the router" not in out, "the refused run drained a replica"


def test_an_interrupted_rollout_resumes_when_run_again_and_one_run_holds_the_fleet(run_playbook) -> None:
    """The same command (gpu-node-1 back to the inventory's settings) stopped at four points, by Ctrl-C and by
    killing the control process outright, then run once more to the end: each run resumes the switch the one
    before left (the node's switch record), and the last one ends with the replica proven, back in the router,
    not held, and on the inventory's unit. gpu-node-1 starts out of the router from the failed restore above.
    Meanwhile the fleet lock: a second rollout started while the first waits for its restarted server is
    refused, naming the first, once it saw the first's lease renewed, and drains nothing; Ctrl-C releases the
    lock (callback glm5_fleet_lock); a killed run's lock is taken over by the next run of the same
    controller."""
    argv = [PLAYBOOK_BIN, "playbooks/rolling_update.yml", "--limit", ROLLED, "-vvv"]
    # A real switch (drain, new unit, restart) whatever the node's history: its unit gets a line the
    # inventory's does not have, which the rollout repairs.
    lab(ROLLED, "echo '# lab: drift the rollout repairs' >> /etc/systemd/system/sglang.service")
    refused: list[tuple[int, str]] = []
    # Whether the run before left its lock behind (SIGKILL, or Ctrl-C pressed twice); the run before the
    # first is another test's: not judged.
    killed_before: bool | None = None
    for where, banner, sig in INTERRUPTIONS:
        meanwhile = None
        if sig == signal.SIGKILL and not refused:  # the first switch's health wait: a minute of a model load

            def meanwhile() -> None:
                refused.append(playbook([PLAYBOOK_BIN, "playbooks/rolling_update.yml", "-vvv"]))

        rc, out = playbook(argv, banner, sig, meanwhile)
        assert rc != 0, where
        if meanwhile:
            refused_while_held(refused)
            # Held at its banner while the other rollout was refused: killed while the server started, before
            # the inference check (unheld, it went on through the check to the router meanwhile).
            assert INTERRUPTIONS[2][1] not in out, (where, out[-3000:])
        if where != INTERRUPTIONS[0][0]:
            assert "resume the switch an interrupted run began" in out, (where, out[-3000:])
        if killed_before is not None:
            assert ("Took over the fleet lock" in out) == killed_before, (where, out[-3000:])
        twice = "[test] Ctrl-C again" in out
        if sig == signal.SIGINT and not twice:
            assert RELEASED in out, (where, out[-2000:])
        killed_before = RELEASED not in out
        no_key_in(out)
        assert lab(ROLLED, f"test -s {SWITCH_RECORD}", check=False).returncode == 0, where
    assert refused, "no second rollout ran while the first was held"
    run = run_playbook("playbooks/rolling_update.yml", cmdline=f"--limit {ROLLED}", verbosity=3)
    assert run.status == "successful", failure(run, ROLLED) or run.stats or run.stdout[-4000:]
    no_key_in(run.stdout, json.dumps(run.events))
    assert "Took over the fleet lock" in run.stdout
    plan = run.results("Report the replica's plan")[ROLLED]["msg"]
    assert "resume the switch an interrupted run began" in plan, plan
    published = run.custom_stats()["glm5_rollout"][ROLLED]
    assert (published["outcome"], published["verdict"]) == ("updated", "passed"), published
    # A start's waits print its progress (the stdout callback glm5_default), never Ansible's retry lines.
    assert "FAILED - RETRYING: [" + ROLLED + "]: Wait until /health_generate" not in run.stdout
    workers = router_workers()
    assert workers.get(ROLLED_URL, {}).get("is_healthy"), workers
    assert not held(ROLLED_URL)
    assert lab(ROLLED, f"test -e {SWITCH_RECORD}", check=False).returncode == 1
    assert lab("lab-gateway", f"test -e {LOCK}", check=False).returncode == 1, "the lock outlived the run"
    unit = lab(ROLLED, "cat /etc/systemd/system/sglang.service").stdout
    assert "--max-running-requests 2" not in unit and "--max-running-requests 3" not in unit, unit
    # Nothing left to resume: the same command now finds the replica up to date.
    again = run_playbook("playbooks/rolling_update.yml", cmdline=f"--limit {ROLLED}")
    assert again.status == "successful" and again.count("changed", ROLLED) == 0, again.stats
    assert "up to date" in again.results("Report the replica's plan")[ROLLED]["msg"]
    assert again.custom_stats()["glm5_rollout"][ROLLED]["outcome"] == "unchanged"


def test_another_controllers_lock_is_refused_while_it_lives_and_taken_over_when_its_lease_ends(
    run_playbook,
) -> None:
    """Locks of other controllers (records planted on lab-gateway), each refusing a rollout before any node is
    touched, naming its holder: one without a lease (written before leases) until broken; an AWX job's whose
    lease is renewed while the run watches it (that job lives). When the job is gone (its renewals stop), the
    next run watches the lease expire and takes the lock over without any flag, names the job it replaced, and
    releases the lock at the end."""
    planted = {
        "controller": "ops-bastion-2",
        "user": "alice",
        "pid": 4242,
        "pid_start": 1,
        "started": "2026-12-01T09:00:00Z",
        "command": "ansible-playbook playbooks/rollback.yml --limit gpu-node-2",
        "token": "planted",
    }

    def plant(record: dict[str, Any]) -> None:
        lab("lab-gateway", f"mkdir -p -m 0700 {Path(LOCK).parent} && echo '{json.dumps(record)}' > {LOCK}")

    def refusal(run: Run) -> str:
        assert run.status == "failed", run.stats
        stages = {e["event_data"].get("play") for e in run.events if e.get("event") == "runner_on_ok"}
        assert not any(p and p.startswith("Stage") for p in stages), stages
        return "\n".join(
            str(r.get("msg"))
            for r in run.results(
                "Refuse to run while another run holds the fleet lock", "runner_on_failed"
            ).values()
        )

    # The lease the AWX job's record carries: short, so that the lab waits seconds for its end.
    lease = 6
    awx = {**planted, "controller": "awx-job-4711-pod", "user": "runner", "job": "4711", "token": "awx-4711"}
    alive = threading.Event()

    def renew_while_alive() -> None:
        while alive.is_set():
            now = time.time()
            plant({**awx, "lease_seconds": lease, "renewed": now, "expires": now + lease})
            time.sleep(1.0)

    try:
        plant(planted)
        message = refusal(run_playbook("playbooks/rolling_update.yml", cmdline="--limit gpu-node-2"))
        assert "alice@ops-bastion-2 (ansible-playbook PID 4242)" in message, message
        assert "rollback.yml --limit gpu-node-2" in message and "fleet_lock_break=true" in message, message

        alive.set()
        holder = threading.Thread(target=renew_while_alive, daemon=True)
        holder.start()
        watched = run_playbook("playbooks/rolling_update.yml", cmdline="--limit gpu-node-2")
        message = refusal(watched)
        assert "runner@awx-job-4711-pod (AWX job 4711, ansible-playbook PID 4242)" in message, message
        assert "renewed its lease while this one watched it: it is alive" in message, message
        assert "fleet_lock_break" not in message, message
        alive.clear()
        holder.join()

        # The job is gone: nobody renews its lease, which ends in seconds. A rollback with nothing to switch.
        release = lab("gpu-node-2", "basename $(readlink /opt/sglang/current)").stdout.strip()
        taken = run_playbook(
            "playbooks/rollback.yml",
            extravars={"sglang_rollback_release": release},
            cmdline="--limit gpu-node-2",
        )
        assert taken.status == "successful", taken.stats
        assert "up to date" in taken.results("Report the replica's plan")["gpu-node-2"]["msg"]
        assert "Took over the fleet lock" in taken.stdout and "AWX job 4711" in taken.stdout, taken.stdout[
            -3000:
        ]
        assert "its lease expired without a renewal" in taken.stdout
        assert lab("lab-gateway", f"test -e {LOCK}", check=False).returncode == 1
    finally:
        alive.clear()
        lab("lab-gateway", f"rm -f {LOCK}")


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
    drained = [e for e in run.events if e["event_data"].get("task", "").startswith("Take the batch's")]
    assert not drained, "a replica was taken out of the router"
    assert node_state(adhoc) == before
    workers = router_workers()
    assert all(workers.get(node_url(h), {}).get("is_healthy") for h in LAB_NODES), workers


@pytest.fixture(scope="module")
def restore_victim(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, adhoc
) -> Iterator[dict[str, tuple[str, str, str]]]:
    """The nodes' state before the victim's faults. After the last of them (one restart, not one per fault)
    the victim is served from the inventory again, proven and back in the router (restore_nan_node: serve.yml
    validates) -- by the guard's test, which restores that node next, when it runs in this session."""
    before = node_state(adhoc)
    yield before
    if nan_node_restored_later(request.config):
        NAN_NODE_LEFT_BROKEN["broken"] = True
        return
    restore_nan_node(tmp_path_factory.mktemp("victim-restore"), always=True)


@pytest.mark.breaks_nan_node
# tune.yml's run on the other node goes on meanwhile (conftest.tune_beside).
@pytest.mark.usefixtures("tune_beside")
def test_crash_loop_is_reported_with_the_journal(restore_victim, run_playbook, adhoc) -> None:
    """A bad model path: the server dies at start and systemd restarts it; the wait ends on the first restart
    (sglang_server_crash_restarts 1 here: the default's 2 only add a failed start and a RestartSec, and the
    threshold is the module's, tests/unit/test_service_start.py), long before the health timeout, and the play
    says so with the journal."""
    run = run_playbook(
        "playbooks/serve.yml",
        extravars={
            "sglang_server_model_path": f"{MODELS}/no-such-model",
            "sglang_server_crash_restarts": 1,
            # Far above the restart's half minute (a failed start of about 15 s, then RestartSec): only the
            # crash-loop verdict can end the wait in time for the message below.
            "sglang_server_health_timeout": 300,
        },
        cmdline=f"--limit {VICTIM}",
    )
    # The verdict is in; systemd would go on restarting the bad launch (an import of the whole server every
    # RestartSec) while the next test's serve.yml checks its flags, until that run replaces the unit.
    lab(VICTIM, "systemctl stop sglang", check=False)
    assert run.status == "failed"
    message = failure(run, VICTIM)
    assert "did not become healthy: a crash loop" in message, message[:3000]
    assert "Last journal lines" in message and "no-such-model" in message, message[-3000:]
    after = node_state(adhoc)
    for host in LAB_NODES:
        if host != VICTIM:
            assert after[host] == restore_victim[host], host


@pytest.mark.breaks_nan_node
# tune.yml's run on the other node goes on meanwhile (conftest.tune_beside).
@pytest.mark.usefixtures("tune_beside")
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
            # Only waits for the verdict: rank 0 waits in the rendezvous for good, with no restart.
            "sglang_server_health_timeout": 30,
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
