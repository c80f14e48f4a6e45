"""Issue 40: the engine stops at its first NaN, per lane, as data.

- Every GPU profile turns the fail-stop on, with a source; every deployable lane says how (lanes.yml
  nan_fail_stop): the current lane by sglang 0.5.23's SGLANG_ENABLE_NAN_LOGITS_CHECK, the seed lane by
  --enable-nan-detection plus the node's tripwire. sglang_nan_fail_stop_off turns it off per profile, only
  with a reason, and every deploy says so.
- The tripwire (roles/sglang_server/files/sglang_nan_tripwire.py) stops the service at the seed release's
  exact log line (srt/layers/sampler.py of the 0.5.9 wheel; tests/parser checks the line against the real
  source), once per run of the service, never a run that started after the line.
- The health wait ends at once on a start that ended on the fail-stop, naming the journal line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.service_start import (
    fail_stop_line,
    fail_stop_symptom,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    SglangFlagError,
    load_lanes,
    load_profiles,
    render_sglang_args,
    resolve_profile,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    fail_stop_line as launch_fail_stop_line,
)
from controller_play import ansible_playbook

ROOT = Path(__file__).resolve().parents[2]
TRIPWIRE = ROOT / "roles" / "sglang_server" / "files" / "sglang_nan_tripwire.py"
# sglang 0.5.9 srt/layers/sampler.py:67, as the server's logging configuration writes it to the journal
# ("[%(asctime)s] %(message)s", roles/sglang_server/vars/main.yml).
SEED_LINE = "Detected errors during sampling! NaN in the logits."
SEED_JOURNAL = f"[2026-12-05 02:10:11] {SEED_LINE}"
# sglang 0.5.23 with SGLANG_ENABLE_NAN_LOGITS_CHECK=1 on CPU (the lab): the scheduler's exception.
CURRENT_JOURNAL = "RuntimeError: NaN detected! sampler: next_token_logits"


def _resolve(arch: str, lane: str, off: str | None = None) -> dict:
    return resolve_profile(load_profiles(), arch, lane, lanes=load_lanes(), fail_stop_off=off)


@pytest.mark.parametrize("arch", sorted(load_profiles()))
def test_every_profile_turns_the_fail_stop_on_with_a_source(arch: str) -> None:
    entry = load_profiles()[arch]["nan_fail_stop"]
    assert entry["value"] is True and entry["source"], entry


@pytest.mark.parametrize("lane", sorted(n for n, lane in load_lanes().items() if lane.get("deployable")))
def test_every_deployable_lane_says_how_its_engine_stops(lane: str) -> None:
    spec = load_lanes()[lane]["nan_fail_stop"]
    assert spec["how"] and spec["source"] and spec["journal_pattern"], spec
    assert spec.get("settings") or spec.get("environment"), spec


def test_the_current_lane_stops_by_sglangs_own_variable() -> None:
    for arch in ("sm120", "sm100", "sm90", "cpu"):
        launch = _resolve(arch, "current")
        assert launch["environment"]["SGLANG_ENABLE_NAN_LOGITS_CHECK"] == "1", arch
        assert launch["sources"]["environment.SGLANG_ENABLE_NAN_LOGITS_CHECK"].startswith("nan_fail_stop: ")
        fail_stop = launch["fail_stop"]
        assert fail_stop["on"] and not fail_stop["tripwire"] and not fail_stop["off_reason"], fail_stop
        assert fail_stop["journal_pattern"] in CURRENT_JOURNAL
        assert "enable_nan_detection" not in launch["settings"]
        assert launch_fail_stop_line(launch).startswith(f"{arch}/current: fail-stop on NaN: ")


def test_the_seed_lane_stops_by_its_flag_and_the_tripwire() -> None:
    launch = _resolve("sm120", "seed")
    assert launch["settings"]["enable_nan_detection"] is True
    assert "--enable-nan-detection" in render_sglang_args(launch["settings"], launch["sglang_version"])
    assert "SGLANG_ENABLE_NAN_LOGITS_CHECK" not in launch["environment"]  # 0.5.9 has no such variable
    assert launch["fail_stop"]["tripwire"] == SEED_LINE
    assert launch["fail_stop"]["journal_pattern"] in SEED_JOURNAL
    assert "sglang-nan-tripwire.service" in launch_fail_stop_line(launch)


def test_an_operator_turns_it_off_per_profile_with_a_reason() -> None:
    launch = _resolve("sm120", "current", off="measuring the check's cost on node 1")
    assert "SGLANG_ENABLE_NAN_LOGITS_CHECK" not in launch["environment"]
    assert not launch["fail_stop"]["on"]
    line = launch_fail_stop_line(launch)
    assert line.startswith("WARNING: sm120/current: fail-stop on NaN is off") and "measuring" in line, line
    seed = _resolve("sm120", "seed", off="a reason")
    assert "enable_nan_detection" not in seed["settings"] and not seed["fail_stop"]["tripwire"]
    for empty in ("", "  "):
        with pytest.raises(SglangFlagError, match="without a reason"):
            _resolve("sm120", "current", off=empty)


def test_the_filter_takes_the_reason_of_this_profile_only() -> None:
    from ansible_collections.glm5.deploy.plugins.filter.sglang import sglang_profile

    assert sglang_profile("sm120", "current", {}, {}, "", {"cpu": "lab only"})["fail_stop"]["on"]
    assert not sglang_profile("cpu", "current", {}, {}, "", {"cpu": "lab only"})["fail_stop"]["on"]
    with pytest.raises(SglangFlagError, match="without a reason"):
        sglang_profile("cpu", "current", {}, {}, "", {"cpu": None})


def test_an_inventory_override_still_wins_over_the_fail_stop() -> None:
    launch = resolve_profile(
        load_profiles(),
        "cpu",
        "current",
        lanes=load_lanes(),
        environment_overrides={"SGLANG_ENABLE_NAN_LOGITS_CHECK": None},
    )
    assert "SGLANG_ENABLE_NAN_LOGITS_CHECK" not in launch["environment"]


# ------------------------------------------------------------------------------------ the health wait ----


def test_the_health_wait_names_the_fail_stop_line() -> None:
    lines = ["[x] Load weight end.", f"[x] Scheduler hit an exception: {CURRENT_JOURNAL}", "[x] more"]
    found = fail_stop_line(lines, "NaN detected! sampler")
    assert found == f"[x] Scheduler hit an exception: {CURRENT_JOURNAL}"
    assert fail_stop_line(lines, "") is None and fail_stop_line(["ok"], "NaN detected! sampler") is None
    symptom = fail_stop_symptom(found)
    assert "stopped at its first NaN" in symptom and CURRENT_JOURNAL in symptom


# ------------------------------------------------------------------------------------ the tripwire ----


@pytest.fixture(scope="module")
def tripwire() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_nan_tripwire", TRIPWIRE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(message: object, invocation: str = "a" * 32) -> str:
    return json.dumps({"MESSAGE": message, "_SYSTEMD_INVOCATION_ID": invocation})


def test_the_seed_releases_line_stops_the_running_service_once(tripwire: ModuleType) -> None:
    stops: list[str] = []
    said: list[str] = []
    lines = [
        _entry("[x] Prefill batch. #new-seq: 1"),
        "not json",
        _entry(SEED_JOURNAL),
        _entry(SEED_JOURNAL),  # the sampler logs it at every step; one stop per run
        _entry("[x] Decode batch."),
    ]
    count = tripwire.watch(
        lines, SEED_LINE, lambda: "a" * 32, lambda: stops.append("kill") or True, said.append
    )
    assert count == 1 and stops == ["kill"], said
    assert said[0].startswith("sglang-nan-tripwire: NaN in the logits of the running server, stopping it: ")
    assert SEED_LINE in said[0]


def test_a_line_of_an_earlier_run_never_stops_the_new_one(tripwire: ModuleType) -> None:
    stops: list[str] = []
    old, new = "a" * 32, "b" * 32
    count = tripwire.watch(
        [_entry(SEED_JOURNAL, old), _entry(SEED_JOURNAL, new)],
        SEED_LINE,
        lambda: new,
        lambda: stops.append("k") or True,
        print,
    )
    assert count == 1 and stops == ["k"]
    # A message journalctl could not decode arrives as a list of bytes.
    as_bytes = list(SEED_JOURNAL.encode())
    assert tripwire.parse_entry(_entry(as_bytes, new)) == (SEED_JOURNAL, new)


def test_a_failed_stop_is_tried_again_at_the_next_line(tripwire: ModuleType) -> None:
    results = iter([False, True])
    said: list[str] = []
    count = tripwire.watch(
        [_entry(SEED_JOURNAL)] * 3, SEED_LINE, lambda: "a" * 32, lambda: next(results), said.append
    )
    assert count == 1 and any("the stop failed" in line for line in said), said


def test_the_tripwire_process_kills_the_whole_service(tripwire: ModuleType, tmp_path: Path) -> None:
    """The script as systemd runs it, with journalctl and systemctl replaced by files: the exact seed line in
    the journal makes it call `systemctl kill --kill-whom=all --signal=SIGKILL sglang.service`."""
    journal = tmp_path / "journal.json"
    journal.write_text("\n".join([_entry("[x] Decode batch."), _entry(SEED_JOURNAL)]) + "\n")
    calls = tmp_path / "calls"
    systemctl = tmp_path / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nif [ "$1" = show ]; then echo {"a" * 32}; fi\n')
    systemctl.chmod(systemctl.stat().st_mode | stat.S_IEXEC)
    done = subprocess.run(
        [sys.executable, str(TRIPWIRE), "--line", SEED_LINE, "--systemctl", str(systemctl),
         "--journalctl", f"cat {journal}"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the stream ended: systemd restarts it
    made = calls.read_text().splitlines()
    assert made == ["show sglang.service --property InvocationID --value",
                    "kill --kill-whom=all --signal=SIGKILL sglang.service"], made  # fmt: skip
    assert (
        "stopping it: [2026-12-05 02:10:11] Detected errors during sampling! NaN in the logits."
        in done.stdout
    )


def test_the_tripwire_unit_renders_for_the_seed_lane_and_systemd_accepts_it(tmp_path: Path) -> None:
    """The role's unit template, rendered by Ansible for sm120/seed as the role does, is a unit that
    `systemd-analyze verify` accepts, and runs the tripwire on the seed release's exact line."""
    unit = tmp_path / "sglang-nan-tripwire.service"
    play = tmp_path / "play.yml"
    template = ROOT / "roles" / "sglang_server" / "templates" / "sglang-nan-tripwire.service.j2"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n  connection: local\n  vars:\n"
        "    sglang_launch: \"{{ 'sm120' | glm5.deploy.sglang_profile('seed') }}\"\n"
        "    __sglang_server_tripwire_script: /usr/local/lib/glm5-deploy/sglang_nan_tripwire.py\n"
        "  tasks:\n    - name: Render the unit\n      ansible.builtin.copy:\n"
        f"        content: \"{{{{ lookup('ansible.builtin.template', '{template}') }}}}\"\n"
        f"        dest: {unit}\n        mode: '0644'\n"
    )
    done = ansible_playbook(
        "-i", "localhost,", str(play), "-e", f"ansible_python_interpreter={sys.executable}"
    )
    assert done.returncode == 0, done.stdout[-3000:]
    text = unit.read_text()
    assert (
        "ExecStart=/usr/bin/python3 /usr/local/lib/glm5-deploy/sglang_nan_tripwire.py --unit sglang.service "
        f'--line "{SEED_LINE}"'
    ) in text, text
    assert "CapabilityBoundingSet=CAP_KILL CAP_DAC_READ_SEARCH" in text and "PrivateNetwork=yes" in text
    verify = shutil.which("systemd-analyze")
    if verify:
        checked = subprocess.run([verify, "verify", str(unit)], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stderr
