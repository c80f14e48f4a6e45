"""Verify the default scenario: each lab node runs the real sglang under systemd and answers."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

# The server binds to the node's lab-network address (never 0.0.0.0) and wants the lab's API key
# (inventory/lab/group_vars/lab.yml); /health* is open, as in sglang.
LAB_VARS = Path(__file__).resolve().parents[3] / "inventory" / "lab" / "group_vars" / "lab.yml"
API_KEY = yaml.safe_load(LAB_VARS.read_text())["sglang_server_api_key"]


# A node with a TLS certificate (inventory/lab/host_vars/gpu-node-2.yml) serves https only, verified against
# the nodes' CA where the role writes it.
NODES_CA = "/etc/glm5-deploy/nodes-ca.pem"


def server(host) -> str:
    """The node's server as curl's arguments: its URL, and the CA for a node that speaks TLS."""
    name = host.check_output("hostname")
    if host.file("/etc/sglang/tls.crt").exists:
        return f"--cacert {NODES_CA} https://{name}:30000"
    return f"http://{name}:30000"


TLS_NODE = "gpu-node-2"


def test_the_lab_node_with_a_certificate_speaks_tls_only_and_the_others_plain_http(host) -> None:
    name = host.check_output("hostname")
    argv = host.check_output("systemctl show sglang -p ExecStart --value")
    assert host.file("/etc/sglang/tls.crt").exists == (name == TLS_NODE)
    assert ("--ssl-certfile /etc/sglang/tls.crt" in argv) == (name == TLS_NODE)
    if name == TLS_NODE:
        assert "--ssl-keyfile /etc/sglang/tls.key" in argv and f"--ssl-ca-certs {NODES_CA}" in argv
        key = host.file("/etc/sglang/tls.key")
        assert (key.user, key.group, oct(key.mode)) == ("root", "sglang", "0o640")
        plain = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' -m 10 http://{name}:30000/health")
        assert plain.stdout == "000", plain.stdout  # no HTTP answer on the TLS port


def test_service_is_enabled_and_running(host) -> None:
    service = host.service("sglang")
    assert service.is_enabled
    assert service.is_running
    assert host.check_output("systemctl show sglang -p User --value") == "sglang"


def test_health_generate_answers_200(host) -> None:
    code = host.check_output(f"curl -s -o /dev/null -w '%{{http_code}}' -m 60 {server(host)}/health_generate")
    assert code == "200"


def test_the_model_answers_four(host) -> None:
    body = json.dumps(
        {
            "model": "default",
            "messages": [{"role": "user", "content": "What is 2+2? Answer briefly."}],
            "temperature": 0,
            "max_tokens": 64,
        }
    )
    raw = host.check_output(
        f"curl -s -m 120 -H 'Content-Type: application/json' -H 'Authorization: Bearer {API_KEY}' "
        f"-d '{body}' {server(host)}/v1/chat/completions"
    )
    choice = json.loads(raw)["choices"][0]
    assert choice["message"]["content"] == "4"
    assert choice["finish_reason"] == "stop"


def test_exec_start_is_the_cpu_profile_on_the_current_lane(host) -> None:
    shown = host.check_output("systemctl show sglang -p ExecStart --value")
    argv = shown.split("argv[]=", 1)[1].split(" ;")[0]
    assert argv.startswith("/opt/sglang/releases/0.5.23-")
    for flag in (
        "--device cpu",
        "--attention-backend torch_native",
        "--cuda-graph-backend-decode disabled",
        "--reasoning-parser glm45",
        "--sleep-on-idle",
        "--enable-metrics",
    ):
        assert flag in argv, flag
    assert "--disable-cuda-graph" not in argv and "--nsa-" not in argv


def test_the_server_is_not_open_without_its_key(host) -> None:
    code = host.check_output(f"curl -s -o /dev/null -w '%{{http_code}}' -m 30 {server(host)}/v1/models")
    assert code == "401"


def test_the_server_binds_to_the_node_address_only(host) -> None:
    listening = host.check_output("ss -Hltn 'sport = :30000'")
    assert "0.0.0.0:30000" not in listening and "*:30000" not in listening
    assert host.check_output("getent hosts $(hostname) | cut -d' ' -f1") + ":30000" in listening
