"""Verify the preflight scenario: a lab SM120 host after preflight (testinfra, podman backend)."""

from __future__ import annotations

import json


def test_gpu_facts_recorded(host) -> None:
    fact = host.file("/etc/ansible/facts.d/glm5_gpu.fact")
    assert fact.exists
    assert fact.mode == 0o644
    facts = json.loads(fact.content_string)
    assert facts["arch"] == "sm120"
    assert facts["count"] == 8
    assert facts["names"] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    assert facts["nvlink"] is False


def test_recorded_facts_match_nvidia_smi(host) -> None:
    listed = host.check_output("nvidia-smi -L").splitlines()
    facts = json.loads(host.file("/etc/ansible/facts.d/glm5_gpu.fact").content_string)
    assert len(listed) == facts["count"]
    assert all(f"GPU {i}: {facts['names'][0]} (UUID: GPU-" in line for i, line in enumerate(listed))
