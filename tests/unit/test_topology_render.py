"""A two-node replica rendered by the real Ansible: ranks 0 and 1, rank 0's --dist-init-addr, and only rank
0 (plus the one-node replica) registered with the router. Runs ansible-playbook on the controller only."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from controller_play import ansible_playbook

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "topology"


def exec_start(unit: str) -> list[str]:
    line = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("units")
    run = ansible_playbook("-i", str(FIXTURE / "hosts.yml"), str(FIXTURE / "render.yml"), "-e", f"out={out}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return {p.stem: p.read_text() for p in out.glob("*.service")} | {
        p.name: p.read_text() for p in out.glob("*.replica")
    }


@pytest.fixture(scope="module")
def replicas(units: dict[str, str]) -> dict[str, dict]:
    replica_files = {name: text for name, text in units.items() if name.endswith(".replica")}
    return {name.removesuffix(".replica"): json.loads(text) for name, text in replica_files.items()}


def test_the_two_node_replica_gets_ranks_and_rank_0s_address(units: dict[str, str]) -> None:
    b, c = exec_start(units["node-b"]), exec_start(units["node-c"])
    assert (flag(b, "--nnodes"), flag(b, "--node-rank")) == ("2", "0")
    assert (flag(c, "--nnodes"), flag(c, "--node-rank")) == ("2", "1")
    assert flag(b, "--dist-init-addr") == flag(c, "--dist-init-addr") == "10.0.0.7:20000"
    assert flag(b, "--tp-size") == flag(c, "--tp-size") == "16"


def test_a_one_node_replica_renders_no_multi_node_flags(units: dict[str, str]) -> None:
    a = exec_start(units["node-a"])
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(a)
    assert flag(a, "--tp-size") == "8"


def test_only_rank_0_is_registered_with_the_router(units: dict[str, str], replicas: dict[str, dict]) -> None:
    # The router starts with no worker: a replica is registered only once proven (validate.yml, replica.yml).
    router = exec_start(units["gateway"])
    assert "--worker-urls" not in router and not any("10.0.0." in a for a in router)
    assert "not-a-secret-test-key" not in units["gateway"]
    # replica.yml: each node's replica is its rank 0's URL, and only rank 0 registers it.
    assert replicas["node-a"] == {"leader": True, "url": "http://10.0.0.5:30000"}
    assert replicas["node-b"] == {"leader": True, "url": "http://10.0.0.7:30000"}
    assert replicas["node-c"] == {"leader": False, "url": "http://10.0.0.7:30000"}


def test_the_unit_has_nvidia_modprobe_make_the_devices_with_full_privileges(units: dict[str, str]) -> None:
    """Before each start, '+' (full privileges) nvidia-modprobe loads nvidia with nvidiactl (minor 255), then
    nvidia-uvm with /dev/nvidia-uvm; the server itself keeps no privilege. The lines depend on no fact."""
    lines = units["node-a"].splitlines()
    pre = [line for line in lines if line.startswith("ExecStartPre=")]
    assert pre == [
        "ExecStartPre=+/usr/bin/nvidia-modprobe -c=255",
        "ExecStartPre=+/usr/bin/nvidia-modprobe -u -c=0",
    ]
    assert lines.index(pre[-1]) < next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    kept = ["NoNewPrivileges=yes", "CapabilityBoundingSet=", "DevicePolicy=closed"]
    for setting in [*kept, "DeviceAllow=char-nvidia-uvm rw"]:
        assert setting in lines, setting


def test_no_nvidia_modprobe_when_the_node_makes_its_devices_otherwise(units: dict[str, str]) -> None:
    assert not [line for line in units["node-c"].splitlines() if line.startswith("ExecStartPre=")]
