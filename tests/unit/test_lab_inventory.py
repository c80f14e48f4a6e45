"""lab/bin/lab-inventory: the lab's size as a variable (make LAB_NODES=N)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "lab" / "bin" / "lab-inventory"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_two_nodes_is_the_committed_lab_inventory() -> None:
    assert run("2").stdout.strip() == str(ROOT / "inventory" / "lab")
    hosts = yaml.safe_load((ROOT / "inventory" / "lab" / "hosts.yml").read_text())["all"]["children"]
    assert list(hosts["sglang_nodes"]["hosts"]) == ["gpu-node-1", "gpu-node-2"]


def test_n_nodes_get_their_own_inventory_with_the_lab_settings() -> None:
    out = run("5")
    assert out.returncode == 0, out.stderr
    directory = Path(out.stdout.strip())
    assert directory == ROOT / "build" / "lab-5"
    hosts = yaml.safe_load((directory / "hosts.yml").read_text())["all"]["children"]
    nodes = hosts["sglang_nodes"]["hosts"]
    assert list(nodes) == [f"gpu-node-{i}" for i in range(1, 6)]
    assert nodes["gpu-node-5"] == {"ansible_host": "glm5-lab-gpu-node-5"}
    assert hosts["sglang_router"]["hosts"] == {"lab-gateway": {"ansible_host": "glm5-lab-lab-gateway"}}
    assert set(hosts["lab"]["children"]) == {"sglang_nodes", "sglang_router"}
    # lab_dir is inventory_dir/../../lab: the inventory sits two levels below the project, as inventory/lab.
    assert directory.parent.parent == ROOT
    assert (directory / "group_vars").resolve() == ROOT / "inventory" / "lab" / "group_vars"


@pytest.mark.parametrize("bad", ["", "0", "17", "three", "-1"])
def test_a_bad_size_is_refused(bad: str) -> None:
    out = run(bad)
    assert out.returncode == 2 and "usage" in out.stderr
