"""The fleet lock: the run's record, the decisions, the holder's words, the module on a real file, and the
callback's release command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_lock import (
    LockError,
    after_wait,
    awx_job,
    check_record,
    controller_run,
    decide,
    describe,
    holder_gone,
    lease_state,
    leased,
    main_process,
    recorded_command,
    release_decision,
    renew,
    renew_interval,
    renewal_timeout,
    renewal_verdict,
    stat_start,
    stop_margin,
)
from hypothesis import given
from hypothesis import strategies as st
from project_modules import load_module

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 1, 14, 30, tzinfo=UTC)
PLAYBOOK = ["/usr/bin/python3", "/srv/.venv/bin/ansible-playbook", "playbooks/rolling_update.yml"]


def stat(pid: int, ppid: int, start: int, comm: str = "ansible-playboo") -> str:
    """A /proc/<pid>/stat line with this parent and start time (field 22)."""
    fields = ["S", str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 10
    return f"{pid} ({comm}) " + " ".join(fields)


# A shell (100) that started ansible-playbook (200), which forked a worker (300).
PROCS = {
    100: (stat(100, 1, 50, comm="ba sh) (x"), ["bash"]),
    200: (stat(200, 100, 7000), [*PLAYBOOK, "-e", "sglang_server_api_key=s3cret", "--limit", "gpu-node-1"]),
    300: (stat(300, 200, 7100), [*PLAYBOOK, "-e", "sglang_server_api_key=s3cret", "--limit", "gpu-node-1"]),
}


def read_stat(pid: int) -> str:
    if pid not in PROCS:
        raise FileNotFoundError(pid)
    return PROCS[pid][0]


def read_cmdline(pid: int) -> list[str]:
    return PROCS[pid][1]


def me(pid: int = 300) -> dict[str, Any]:
    return controller_run("bastion", "ops", pid, read_stat, read_cmdline, NOW)


def test_stat_fields_survive_spaces_and_parentheses_in_the_command_name() -> None:
    line = stat(100, 1, 50, comm="ba sh) (x")
    assert stat_start(line) == 50


def test_the_main_process_is_the_last_ancestor_with_the_same_command_line() -> None:
    assert main_process(300, read_stat, read_cmdline) == 200
    assert main_process(200, read_stat, read_cmdline) == 200


def test_the_recorded_command_keeps_playbooks_and_limits_and_drops_extra_vars() -> None:
    argv = [
        *PLAYBOOK,
        "-e",
        "k=s3cret",
        "--extra-vars=k2=x",
        "-i",
        "inventory/prod",
        "--limit=gpu-node-1",
        "-vvv",
    ]
    assert recorded_command(argv) == (
        "ansible-playbook playbooks/rolling_update.yml -i inventory/prod --limit=gpu-node-1"
    )
    assert "s3cret" not in recorded_command(PROCS[200][1])


def test_every_task_of_a_run_gets_the_same_token_and_the_next_run_another() -> None:
    worker, main = me(300), me(200)
    assert worker["token"] == main["token"] and worker["pid"] == 200 and worker["pid_start"] == 7000
    assert "s3cret" not in json.dumps(worker)
    PROCS[201] = (stat(201, 100, 9000), PROCS[200][1])
    try:
        assert me(201)["token"] != worker["token"]
    finally:
        del PROCS[201]


def test_decide() -> None:
    mine, other = me(), {**me(), "token": "other"}
    assert decide(None, mine, "") == "take"
    assert decide(mine, mine, "") == "keep"
    assert decide(other, mine, "") == "refuse"
    assert decide(other, mine, "*") == "take_over"
    assert decide(other, mine, "other") == "take_over"
    assert decide(other, mine, "a-third-token") == "refuse"


def test_release_only_what_the_run_holds() -> None:
    assert release_decision(None, "t") == "free"
    assert release_decision({"token": "t"}, "t") == "release"
    assert release_decision({"token": "u"}, "t") == "other"


def test_a_holder_is_gone_only_on_this_controller_and_when_its_process_ended() -> None:
    holder = me()
    assert not holder_gone(holder, me(), read_stat)  # still running
    assert holder_gone({**holder, "pid": 999}, me(), read_stat)  # no such PID
    assert holder_gone({**holder, "pid_start": 1}, me(), read_stat)  # the PID was reused
    assert not holder_gone({**holder, "pid": 999, "controller": "other-host"}, me(), read_stat)


def test_describe_names_who_where_which_process_since_when_and_what() -> None:
    words = describe({**me(), "started": "2026-12-01T14:16:00Z"}, NOW)
    assert words == (
        "ops@bastion (ansible-playbook PID 200), since 2026-12-01T14:16:00Z (14 min ago): "
        "ansible-playbook playbooks/rolling_update.yml --limit gpu-node-1"
    )


def test_check_record_names_missing_fields() -> None:
    with pytest.raises(LockError, match="token"):
        check_record({k: v for k, v in me().items() if k != "token"})
    with pytest.raises(LockError):
        check_record(["not", "a", "mapping"])


fleet_lock = load_module("fleet_lock")


def run_module(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        fleet_lock.main()
    return json.loads(capsys.readouterr().out)


def test_the_module_takes_keeps_refuses_and_releases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "lock" / "fleet.lock")
    first, second = me(), {**me(), "token": "second", "user": "other"}
    taken = run_module({"path": path, "holder": first, "lock_host": "gw"}, capsys)
    assert taken["action"] == "take" and taken["fleet_lock"] == {
        "lock_host": "gw",
        "path": path,
        "token": first["token"],
        "lease_seconds": 0,
    }
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert run_module({"path": path, "holder": first}, capsys)["action"] == "keep"
    refused = run_module({"path": path, "holder": second}, capsys)
    assert (
        refused["refused"] and refused["holder"]["token"] == first["token"] and refused["fleet_lock"] is None
    )
    assert run_module({"path": path, "state": "released", "token": "second"}, capsys)["action"] == "other"
    assert Path(path).exists(), "a run released a lock it does not hold"
    broken = run_module({"path": path, "holder": second, "take_over": "*"}, capsys)
    assert broken["action"] == "take_over" and json.loads(Path(path).read_text())["token"] == "second"
    assert run_module({"path": path, "state": "released", "token": "second"}, capsys)["action"] == "release"
    assert not Path(path).exists()


def test_the_module_in_check_mode_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.lock"
    result = run_module({"path": str(path), "holder": me(), "_ansible_check_mode": True}, capsys)
    assert result["action"] == "take" and not path.exists()


def test_a_damaged_record_refuses_until_broken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fleet.lock"
    path.write_text("{not json")
    refused = run_module({"path": str(path), "holder": me()}, capsys)
    assert refused["refused"] and "damaged" in refused["holder"]
    assert run_module({"path": str(path), "holder": me(), "take_over": "*"}, capsys)["action"] == "take_over"


def test_two_runs_at_once_one_takes_the_lock(tmp_path: Path) -> None:
    """Six processes ask for the lock at once: the module's read-decide-write holds an flock, so one takes it
    and five are refused."""
    root = Path(__file__).resolve().parents[2]
    runner = (
        "import sys, runpy;"
        f"sys.path.insert(0, {str(root / 'collections')!r});"
        f"runpy.run_path({str(root / 'plugins' / 'modules' / 'fleet_lock.py')!r}, run_name='__main__')"
    )
    path = tmp_path / "fleet.lock"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", runner],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    for n, proc in enumerate(procs):
        assert proc.stdin is not None
        proc.stdin.write(
            json.dumps({"ANSIBLE_MODULE_ARGS": {"path": str(path), "holder": {**me(), "token": f"run-{n}"}}})
        )
        proc.stdin.close()
    results = []
    for proc in procs:
        assert proc.stdout is not None
        results.append(json.loads(proc.stdout.read())["action"])
        proc.wait()
    assert sorted(results) == ["refuse"] * 5 + ["take"], results


def test_the_callback_releases_with_the_runs_own_options() -> None:
    from importlib.util import module_from_spec, spec_from_file_location

    root = Path(__file__).resolve().parents[2]
    spec = spec_from_file_location("glm5_fleet_lock", root / "plugins" / "callback" / "glm5_fleet_lock.py")
    assert spec and spec.loader
    callback = module_from_spec(spec)
    spec.loader.exec_module(callback)
    lock = {"lock_host": "gw", "path": "/var/lib/glm5-deploy/fleet.lock", "token": "t"}
    args = {
        "inventory": ("inventory/prod",),
        "extra_vars": ("@vault.yml",),
        "remote_user": "ops",
        "become": True,
        "private_key_file": None,
        "vault_password_files": ("~/.vault",),
    }
    argv = callback.release_argv("/venv/bin/ansible", lock, args)
    assert argv[:4] == ["/venv/bin/ansible", "gw", "-m", "glm5.deploy.fleet_lock"]
    assert json.loads(argv[5]) == {
        **{k: lock[k] for k in ("path", "token", "lock_host")},
        "state": "released",
    }
    for pair in (
        ["-i", "inventory/prod"],
        ["-e", "@vault.yml"],
        ["-u", "ops"],
        ["--vault-password-file", "~/.vault"],
    ):
        assert any(argv[i : i + 2] == pair for i in range(len(argv))), pair
    assert "-b" in argv and "--private-key" not in argv


# The lease (AWX jobs and lost controllers: no PID to check, so a lease that a live run renews).

T0 = 1_764_600_000.0


def test_a_lease_is_live_until_it_expires_and_a_record_without_one_has_none() -> None:
    record = leased(me(), T0, 120)
    assert (record["renewed"], record["expires"], record["lease_seconds"]) == (T0, T0 + 120, 120)
    assert lease_state(record, T0 + 119.9) == "live"
    assert lease_state(record, T0 + 120) == "expired"
    assert lease_state(me(), T0) == "none" and lease_state(None, T0) == "none"
    assert lease_state({**record, "expires": "soon"}, T0) == "none"


def test_decide_with_leases() -> None:
    mine = me()
    other = leased({**me(), "token": "other", "controller": "awx-job-pod"}, T0, 120)
    assert decide(other, mine, "", T0 + 10) == "wait"
    assert decide(other, mine, "", T0 + 121) == "take_over"
    assert decide(other, mine, "*", T0 + 10) == "take_over"
    assert decide({**other, "token": mine["token"]}, mine, "", T0 + 500) == "keep"
    # Written without a lease (before leases, or lease 0): refused until broken, as before.
    legacy = {k: v for k, v in other.items() if k not in ("renewed", "expires", "lease_seconds")}
    assert decide(legacy, mine, "", T0 + 10_000) == "refuse"


def test_a_watched_lease_ends_in_a_refusal_when_renewed_and_a_take_over_when_it_expires() -> None:
    first = leased({**me(), "token": "other"}, T0, 30)
    assert after_wait(first, first, T0 + 10) == "wait"
    assert after_wait(first, leased(first, T0 + 20, 30), T0 + 21) == "refuse"  # renewed: alive
    assert after_wait(first, first, T0 + 30) == "take_over"  # expired without a renewal: gone
    assert after_wait(first, None, T0 + 5) == "take"  # released meanwhile
    assert after_wait(first, leased({**me(), "token": "third"}, T0 + 5, 30), T0 + 6) == "refuse"


def test_renew_extends_only_the_holders_own_lease() -> None:
    record = leased(me(), T0, 60)
    action, renewed = renew(record, record["token"], T0 + 20)
    assert action == "renew" and renewed is not None and renewed["expires"] == T0 + 80
    assert renew(record, "another-token", T0 + 20) == ("lost", None)
    assert renew(None, record["token"], T0 + 20) == ("lost", None)
    assert renew(me(), me()["token"], T0) == ("lost", None)  # no lease to renew


@given(lease=st.integers(min_value=3, max_value=3600), since=st.floats(min_value=0, max_value=10_000))
def test_a_run_stops_itself_before_its_lease_can_expire(lease: int, since: float) -> None:
    """A run that could not renew stops itself a margin before the lease ends, whatever the lease; its first
    attempt comes before that margin."""
    verdict = renewal_verdict("failed", since, lease)
    assert verdict == ("expiring" if since >= lease - stop_margin(lease) else "retry")
    assert 0 < renew_interval(lease) < lease - stop_margin(lease)
    assert renewal_verdict("renew", since, lease) == "renewed"
    assert renewal_verdict("lost", since, lease) == "lost"


@given(lease=st.integers(min_value=3, max_value=3600), since=st.floats(min_value=0, max_value=10_000))
def test_a_renewal_attempt_may_take_what_the_lease_leaves_and_no_more(lease: int, since: float) -> None:
    """A renewal that ends in time (before the verdict would stop the run) is never cut short; one that would
    end later is: the time spent plus the attempt's ends when the run must stop, or a second after."""
    timeout = renewal_timeout(lease, since)
    assert timeout >= 1.0
    assert since + timeout == pytest.approx(max(since + 1.0, lease - stop_margin(lease)))


def test_the_awx_job_id_is_recorded_and_named() -> None:
    assert awx_job({"awx_job_id": 4711}) == "4711"
    assert awx_job({"tower_job_id": "12"}) == "12"
    assert awx_job({}) == ""
    run = controller_run("awx-job-4711", "runner", 300, read_stat, read_cmdline, NOW, job="4711")
    record = leased({**run, "started": "2026-12-01T14:16:00Z"}, NOW.timestamp() - 20, 120)
    words = describe(record, NOW)
    assert "runner@awx-job-4711 (AWX job 4711, ansible-playbook PID 200)" in words, words
    assert "lease of 120 s renewed 20 s ago, expiring at 14:31:40Z" in words, words


def test_the_module_leases_renews_and_loses_the_lock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "fleet.lock")
    first = me()
    taken = run_module({"path": path, "holder": first, "lease_seconds": 60, "lock_host": "gw"}, capsys)
    assert taken["fleet_lock"]["lease_seconds"] == 60
    record = json.loads(Path(path).read_text())
    assert record["expires"] - record["renewed"] == 60
    renewed = run_module({"path": path, "state": "renewed", "token": first["token"]}, capsys)
    assert renewed["action"] == "renew" and not renewed["changed"]
    assert json.loads(Path(path).read_text())["renewed"] >= record["renewed"]
    lost = run_module({"path": path, "state": "renewed", "token": "not-the-holder"}, capsys)
    assert lost["action"] == "lost"


def test_the_module_watches_a_lease_until_it_expires_or_is_renewed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead holder's lease (2 s left, nobody renews) is taken over after it expires; a live one (renewed
    while watched) refuses."""
    import threading
    import time as clock

    path = tmp_path / "fleet.lock"
    other = {**me(), "token": "awx", "controller": "awx-job-pod", "job": "4711"}
    path.write_text(json.dumps(leased(other, clock.time() - 28, 30)))
    seen = run_module({"path": str(path), "holder": me(), "lease_seconds": 30}, capsys)
    assert seen["action"] == "wait" and seen["refused"]
    watched = run_module(
        {"path": str(path), "holder": me(), "lease_seconds": 30, "wait_for": seen["holder"]}, capsys
    )
    assert watched["action"] == "take_over" and 1 <= watched["waited"] < 10, watched
    assert json.loads(path.read_text())["token"] == me()["token"]

    alive = leased(other, clock.time(), 30)
    path.write_text(json.dumps(alive))
    renewal = threading.Timer(1.5, lambda: path.write_text(json.dumps(leased(other, clock.time(), 30))))
    renewal.start()
    refused = run_module({"path": str(path), "holder": me(), "lease_seconds": 30, "wait_for": alive}, capsys)
    renewal.join()
    assert refused["action"] == "refuse" and refused["refused"] and refused["waited"] < 10, refused
    assert json.loads(path.read_text())["token"] == "awx"


def test_the_module_in_check_mode_holds_nothing_to_renew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_module(
        {
            "path": str(tmp_path / "fleet.lock"),
            "holder": me(),
            "lease_seconds": 60,
            "_ansible_check_mode": True,
        },
        capsys,
    )
    assert result["action"] == "take" and result["fleet_lock"] is None


def load_callback() -> Any:
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("glm5_fleet_lock", ROOT / "plugins" / "callback" / "glm5_fleet_lock.py")
    assert spec and spec.loader
    callback = module_from_spec(spec)
    spec.loader.exec_module(callback)
    return callback


def test_the_renewer_renews_while_the_run_lives_and_interrupts_it_when_the_lock_is_lost(
    tmp_path: Path,
) -> None:
    """The callback's renewer, as the callback starts it, beside a stand-in for ansible-playbook (a process
    that records the SIGINT it gets) and a stand-in `ansible` that answers renew twice, then lost."""
    calls = tmp_path / "calls"
    ansible = tmp_path / "ansible"
    ansible.write_text(
        "#!/bin/sh\n"
        f"echo x >> {calls}\n"
        f"if [ $(wc -l < {calls}) -le 2 ]; then a=renew; else a=lost; fi\n"
        'echo "gw | SUCCESS => {\\"action\\": \\"$a\\"}"\n'
    )
    ansible.chmod(0o755)
    callback = load_callback()
    argv = callback.renew_argv(str(ansible), {"lock_host": "gw", "path": "/l", "token": "t"}, {})
    assert json.loads(argv[5]) == {"path": "/l", "state": "renewed", "token": "t"}
    job = {"argv": argv, "lease_seconds": 3, "parent": 0, "collections": str(ROOT / "collections")}
    interrupted = tmp_path / "interrupted"
    run = (
        "import json, os, signal, subprocess, sys, time\n"
        f"signal.signal(signal.SIGINT, lambda *_: open({str(interrupted)!r}, 'w').close())\n"
        f"job = {json.dumps(job)}; job['parent'] = os.getpid()\n"
        f"script = {str(ROOT / 'plugins/callback/glm5_fleet_lock.py')!r}\n"
        "r = subprocess.Popen([sys.executable, script, json.dumps(job)], stderr=subprocess.PIPE, text=True)\n"
        "print(r.wait(timeout=30)); print(r.stderr.read())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", run], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert calls.read_text().count("x") == 3  # renewed, renewed, lost
    assert interrupted.exists(), done.stdout
    assert "another run holds it now" in done.stdout and "Stopping this run" in done.stdout, done.stdout


def test_the_renewer_stops_when_the_run_ends(tmp_path: Path) -> None:
    """An orphaned renewer (its ansible-playbook killed) renews nothing more and signals no one."""
    callback = load_callback()
    calls = tmp_path / "calls"
    ansible = tmp_path / "ansible"
    ansible.write_text(f'#!/bin/sh\necho x >> {calls}\necho \'gw | SUCCESS => {{"action": "renew"}}\'\n')
    ansible.chmod(0o755)
    argv = callback.renew_argv(str(ansible), {"lock_host": "gw", "path": "/l", "token": "t"}, {})
    # The parent is not this renewer's parent: it behaves as an orphan from its first look.
    assert callback.renew_while_alive(argv, 3, parent=-1) == "ended"
    assert not calls.exists()


def test_module_action_reads_ansibles_minimal_output() -> None:
    callback = load_callback()
    assert callback.module_action('gw | SUCCESS => {"action": "renew", "changed": false}') == "renew"
    many_lines = 'gw | SUCCESS => {\n    "action": "lost",\n    "changed": false\n}\n'
    assert callback.module_action(many_lines) == "lost"
    assert callback.module_action('gw | UNREACHABLE! => {"msg": "ssh"}') == "None"
    assert callback.module_action("ERROR! no inventory") == "failed"


def test_the_ansible_calls_print_ad_hocs_own_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """ansible-runner and AWX put a stdout callback of their own in the environment, ansible.cfg a YAML result
    format; with them `ansible` would not print the `host | SUCCESS => {...}` that module_action reads. The
    `-o` flag that forced one line is deprecated."""
    callback = load_callback()
    monkeypatch.setenv("ANSIBLE_LOAD_CALLBACK_PLUGINS", "1")
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "awx_display")
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "yaml")
    monkeypatch.setenv("ANSIBLE_FORCE_COLOR", "1")
    assert callback.ansible_env()["ANSIBLE_LOAD_CALLBACK_PLUGINS"] == "0"
    assert callback.ansible_env()["ANSIBLE_CALLBACK_RESULT_FORMAT"] == "json"
    assert (
        callback.ansible_env()["ANSIBLE_FORCE_COLOR"] == "0"
        and callback.ansible_env()["ANSIBLE_NOCOLOR"] == "1"
    )
    assert "-o" not in callback.renew_argv("ansible", {"lock_host": "gw", "path": "/l", "token": "t"}, {})


def test_the_run_shows_why_its_renewer_stopped_it_or_how_it_died() -> None:
    """The renewer's standard error is the callback's pipe, never the run's (a renewer given the run's stderr
    when that was a pipe died at its start, silently): the run shows its own lines, or how it died."""
    callback = load_callback()
    said = (
        "[WARNING]: something of Ansible's\n[glm5_fleet_lock] ERROR: the fleet lock on gw: lost. Stopping\n"
    )
    assert callback.renewer_messages(said, -2) == [
        "[glm5_fleet_lock] ERROR: the fleet lock on gw: lost. Stopping"
    ]
    assert callback.renewer_messages("", -15) == []  # stopped by the callback
    assert callback.renewer_messages("noise\n", 0) == []
    (died,) = callback.renewer_messages("Traceback (most recent call last):\nImportError: x\n", 1)
    assert "exit code 1" in died and "ImportError: x" in died


def test_a_failed_renewal_is_described_without_its_command_line() -> None:
    """The run prints why its renewals failed; the command carries the run's extra vars, which can be keys."""
    callback = load_callback()
    argv = ["ansible", "gw", "-e", "sglang_router_api_key=glm5-not-a-secret"]
    timed_out = callback.attempt_failure(subprocess.TimeoutExpired(argv, 35.0))
    assert timed_out == "failed: no answer within 35 s"
    missing = callback.attempt_failure(FileNotFoundError(2, "No such file or directory", argv[0]))
    assert missing == "failed: FileNotFoundError: No such file or directory"
    assert "glm5-not-a-secret" not in timed_out + missing
