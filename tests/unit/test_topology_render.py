"""A two-node replica rendered by the real Ansible: ranks 0 and 1, rank 0's --dist-init-addr, and only rank
0 (plus the one-node replica) registered with the router. Runs ansible-playbook on the controller only."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

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
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(FIXTURE / "hosts.yml"),
            str(FIXTURE / "render.yml"),
            "-e",
            f"out={out}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    return {p.stem: p.read_text() for p in out.glob("*.service")}


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


def test_only_rank_0_is_registered_with_the_router(units: dict[str, str]) -> None:
    router = exec_start(units["gateway"])
    urls = router[router.index("--worker-urls") + 1 : router.index("--worker-urls") + 3]
    assert urls == ["http://10.0.0.5:30000", "http://10.0.0.7:30000"]
    assert "http://10.0.0.8:30000" not in router
    assert "not-a-secret-test-key" not in units["gateway"]
