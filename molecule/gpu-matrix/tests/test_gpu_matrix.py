"""Verify the GPU matrix: each host's ExecStart, as systemd parsed it, carries its arch's flags."""

from __future__ import annotations

import json

COMMON = [
    "--quantization",
    "modelopt_fp4",
    "--reasoning-parser",
    "glm45",
    "--tp-size",
    "8",
    "--enable-metrics",
]
# The SM120 default lane (current, sglang 0.5.23; docs/lanes.md): DSA's sparse attention on the SM120 path.
SM120_CURRENT = [
    "--attention-backend dsa",
    "--dsa-prefill-backend flashinfer_sparse_mla",
    "--dsa-decode-backend flashinfer_sparse_mla",
    "--fp8-gemm-backend cutlass",
    "--moe-runner-backend flashinfer_cutlass",
    "--kv-cache-dtype fp8_e4m3",
    "--cuda-graph-backend-decode disabled",
]


def exec_start(host) -> str:
    """The argv systemd parsed from the unit: `systemctl show` prints it as `argv[]=... ;`."""
    shown = host.check_output("systemctl show sglang -p ExecStart --value")
    return shown.split("argv[]=", 1)[1].split(" ;", 1)[0]


def arch(host) -> str:
    return json.loads(host.file("/etc/ansible/facts.d/glm5_gpu.fact").content_string)["arch"]


def test_unit_is_installed_not_started_and_its_argv_is_the_profile(host) -> None:
    argv = exec_start(host)
    assert argv.startswith("/usr/bin/python3 -m sglang.launch_server ")
    assert not host.service("sglang").is_running
    for flag in COMMON:
        assert f" {flag}" in f" {argv}", flag
    assert "--model-path /var/lib/sglang/models/GLM-5-NVFP4" in argv
    # Bound to the node's own address (ansible_host, else its name), never the wildcard.
    assert "--host 0.0.0.0" not in argv and "--host glm5-mol-gm-" in argv and "--port 30000" in argv
    if arch(host) == "sm120":
        for flag in SM120_CURRENT:
            assert flag in argv, flag
    assert "--nsa-" not in argv and "--disable-cuda-graph" not in argv
    assert "trtllm" not in argv


def test_environment_file_is_private_and_carries_the_profile(host) -> None:
    env = host.file("/etc/sglang/sglang.env")
    assert env.mode == 0o600 and env.user == "root"
    text = env.content_string
    assert 'HF_HUB_OFFLINE="1"' in text
    if arch(host) == "sm120":
        assert 'NCCL_P2P_LEVEL="SYS"' in text and 'CUDA_DEVICE_ORDER="PCI_BUS_ID"' in text


def test_service_user_and_hardening(host) -> None:
    assert host.user("sglang").shell == "/usr/sbin/nologin"
    unit = host.file("/etc/systemd/system/sglang.service").content_string
    for line in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "KillSignal=SIGTERM",
        "LimitMEMLOCK=infinity",
        "DevicePolicy=closed",
        "DeviceAllow=char-nvidia-frontend rw",
        "DeviceAllow=char-nvidia-uvm rw",
        "SystemCallFilter=@system-service",
        "ProtectProc=invisible",
    ):
        assert line in unit


def test_gpu_facts_are_recorded_as_nvidia_smi_lists_them(host) -> None:
    """Preflight's GPU facts on each arch (the preflight scenario checked sm120 alone): root-written,
    world-readable, and what the host's nvidia-smi lists, GPU by GPU."""
    fact = host.file("/etc/ansible/facts.d/glm5_gpu.fact")
    assert fact.exists and fact.mode == 0o644
    facts = json.loads(fact.content_string)
    listed = host.check_output("nvidia-smi -L").splitlines()
    assert len(listed) == facts["count"] == 8
    assert all(f"GPU {i}: {facts['names'][0]} (UUID: GPU-" in line for i, line in enumerate(listed))
    if facts["arch"] == "sm120":
        assert facts["names"] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]
        assert facts["nvlink"] is False
