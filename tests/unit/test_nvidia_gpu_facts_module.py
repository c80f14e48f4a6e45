"""modules/nvidia_gpu_facts.py, run in-process against the lab's nvidia-smi stand-in.

A tiny wrapper script named nvidia-smi runs the stand-in with this Python, so the module executes the real
command lines and parses real-format output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from project_modules import load_module

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "lab" / "gpu-standin" / "nvidia-smi"
FIXTURES = ROOT / "lab" / "gpu-standin" / "fixtures"


nvidia_gpu_facts = load_module("nvidia_gpu_facts")


@pytest.fixture
def smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable nvidia-smi that runs the stand-in; choose its fixture with GLM5_LAB_GPU_FIXTURE."""
    wrapper = tmp_path / "bin" / "nvidia-smi"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("GLM5_LAB_GPU_FIXTURE", str(FIXTURES / "sm120.json"))
    return wrapper


def use_fixture(monkeypatch: pytest.MonkeyPatch, fixture: str | Path) -> None:
    path = fixture if isinstance(fixture, Path) else FIXTURES / f"{fixture}.json"
    monkeypatch.setenv("GLM5_LAB_GPU_FIXTURE", str(path))


def run_module(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """Run main() with these arguments; the module's JSON result."""
    with patch_module_args(args), pytest.raises(SystemExit):
        nvidia_gpu_facts.main()
    return json.loads(capsys.readouterr().out)


def test_sm120_node(smi: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_module({"nvidia_smi_path": str(smi)}, capsys)
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    facts = result["ansible_facts"]["nvidia_gpu"]
    assert facts["arch"] == "sm120"
    assert facts["compute_cap"] == "12.0"
    assert facts["count"] == 8
    assert facts["names"] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    assert facts["memory_mib_min"] == 97887
    assert facts["driver_version"] == "580.159.04"
    assert facts["nvlink"] is False
    assert facts["topology"]["link_types"] == ["NODE", "PIX", "SYS"]
    assert [g["pci_bus_id"] for g in facts["gpus"]][:2] == ["00000000:16:00.0", "00000000:27:00.0"]


@pytest.mark.parametrize(("fixture", "arch"), [("sm100", "sm100"), ("sm90", "sm90")])
def test_nvlink_nodes(
    fixture: str, arch: str, smi: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_fixture(monkeypatch, fixture)
    facts = run_module({"nvidia_smi_path": str(smi)}, capsys)["ansible_facts"]["nvidia_gpu"]
    assert (facts["arch"], facts["count"], facts["nvlink"]) == (arch, 8, True)


def test_real_h200_facts(
    smi: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_fixture(monkeypatch, "h200-1gpu")
    facts = run_module({"nvidia_smi_path": str(smi)}, capsys)["ansible_facts"]["nvidia_gpu"]
    assert facts == {
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "compute_cap": "9.0",
                "memory_mib": 143771,
                "driver_version": "580.159.04",
                "pci_bus_id": "00000000:00:06.0",
            }
        ],
        "arch": "sm90",
        "compute_cap": "9.0",
        "count": 1,
        "driver_version": "580.159.04",
        "names": ["NVIDIA H200"],
        "memory_mib_min": 143771,
        "nvlink": False,
        "topology": {"gpus": ["GPU0"], "links": [["X"]], "link_types": [], "nvlink": False},
    }


def test_found_on_path_by_name(
    smi: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", f"{smi.parent}:/usr/bin:/bin")
    result = run_module({}, capsys)
    assert result["ansible_facts"]["nvidia_gpu"]["count"] == 8


def test_topology_can_be_skipped(smi: Path, capsys: pytest.CaptureFixture[str]) -> None:
    facts = run_module({"nvidia_smi_path": str(smi), "topology": False}, capsys)["ansible_facts"][
        "nvidia_gpu"
    ]
    assert facts["nvlink"] is None
    assert facts["topology"] is None
    assert facts["count"] == 8


def test_runs_in_check_mode(smi: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_module({"nvidia_smi_path": str(smi), "_ansible_check_mode": True}, capsys)
    assert result["changed"] is False
    assert result["ansible_facts"]["nvidia_gpu"]["arch"] == "sm120"


# --- failures --------------------------------------------------------------------------------------------


def test_missing_binary_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    for path in ("nvidia-smi", str(tmp_path / "nowhere" / "nvidia-smi")):
        result = run_module({"nvidia_smi_path": path}, capsys)
        assert result["failed"] is True
        assert result["msg"].startswith("nvidia-smi is not installed")
        assert path in result["msg"]
        assert "nvidia_driver_manage" in result["msg"]


def test_driver_not_loaded_fails_with_rc_and_output(
    tmp_path: Path, smi: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = json.loads((FIXTURES / "sm120.json").read_text()) | {"fail": {"exit_code": 9}}
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    use_fixture(monkeypatch, path)
    result = run_module({"nvidia_smi_path": str(smi)}, capsys)
    assert result["failed"] is True
    assert result["rc"] == 9
    assert (
        "exited 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
        in result["msg"]
    )
    assert result["stdout"].startswith("NVIDIA-SMI has failed")
    assert result["cmd"][1].startswith("--query-gpu=index,name,compute_cap")


def test_mixed_architectures_fail(
    tmp_path: Path, smi: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = json.loads((FIXTURES / "sm90.json").read_text())
    mixed["gpus"][6]["compute_cap"] = "12.0"
    mixed["gpus"][7]["compute_cap"] = "12.0"
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(mixed))
    use_fixture(monkeypatch, path)
    result = run_module({"nvidia_smi_path": str(smi)}, capsys)
    assert result["failed"] is True
    assert (
        "mixed GPU architectures on one node: sm90 on GPU 0, 1, 2, 3, 4, 5; sm120 on GPU 6, 7"
        in result["msg"]
    )
    assert str(smi) in result["msg"]


def test_topology_that_disagrees_with_the_query_fails(
    smi: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_run = nvidia_gpu_facts.run_nvidia_smi

    def one_gpu_topology(module: Any, binary: str, args: tuple[str, ...]) -> str:
        if args[0] == "topo":
            return "\tGPU0\tCPU Affinity\nGPU0\t X \t0-15\n"
        return real_run(module, binary, args)

    monkeypatch.setattr(nvidia_gpu_facts, "run_nvidia_smi", one_gpu_topology)
    result = run_module({"nvidia_smi_path": str(smi)}, capsys)
    assert result["failed"] is True
    assert "lists 8 GPU(s) but topo -m shows 1" in result["msg"]
