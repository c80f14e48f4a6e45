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
    check_record,
    controller_run,
    decide,
    describe,
    holder_gone,
    main_process,
    recorded_command,
    release_decision,
    stat_start,
)
from project_modules import load_module

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
    spec = spec_from_file_location(
        "glm5_fleet_lock", root / "plugins" / "callback" / "glm5_fleet_lock.py"
    )
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
