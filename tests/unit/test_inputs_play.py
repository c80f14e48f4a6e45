"""playbooks/inputs.yml run by the real ansible-playbook on the controller (local connection, no lab): the
lab-like fleet of tests/fixtures/inputs passes; hosts that each carry bad inputs are refused in the one task,
each message naming the variable with its path, and no secret or URL credential shows even at -vvv."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller_play import ROOT, ansible_playbook

FIXTURE = ROOT / "tests" / "fixtures" / "inputs" / "hosts.yml"
PROBE = {"name": "four", "prompt": "What is 2+2? Answer briefly.", "max_tokens": 256}

# host -> (its group, its bad inputs, words its refusal must contain, values that must show nowhere)
BAD: dict[str, tuple[str, dict[str, Any], tuple[str, ...], tuple[str, ...]]] = {
    "bad-settings": (
        "sglang_nodes",
        {"sglang_settings": {"cuda_graph_bs_decode": [1, "--host", "0.0.0.0"], "model": "/x", "tp_size": 16}},
        (
            "sglang_settings.cuda_graph_bs_decode[1]",
            "begins with a dash",
            "sglang_settings.model: the role owns this (it sets model_path); set sglang_server_model_path",
            "set preflight_tp_size to 16",
        ),
        (),
    ),
    "bad-secret-and-url": (
        "sglang_nodes",
        {
            "sglang_server_api_key": "two words-hidden-1",
            "model_checkpoint_hf_endpoint": "http://u:pw-hidden-2@lab-gateway:8090",
        },
        ("sglang_server_api_key must be printable ASCII", "model_checkpoint_hf_endpoint carries a user name"),
        ("hidden-1", "pw-hidden-2"),
    ),
    "bad-lines-and-port": (
        "sglang_nodes",
        {
            "model_checkpoint_revision": "0123456789abcdef0123456789abcdef01234567\n",
            "sglang_server_port": 80,
            "sglang_server_health_timeout": 0,
            "sglang_runtime_poll_interval": 0,
            "sglang_validate_probes": [PROBE, PROBE | {"expect": "("}],
            "sglang_server_environment": {"HOME": "/root"},
        },
        (
            "model_checkpoint_revision holds a line break",
            "sglang_server_port is 80, below 1024",
            "sglang_server_health_timeout must be positive",
            "sglang_runtime_poll_interval must be positive",
            "sglang_validate_probes[1].name",
            "sglang_validate_probes[1].expect",
            "sglang_server_environment.HOME: the role owns this; set sglang_server_home",
        ),
        (),
    ),
    "bad-model": (
        "sglang_nodes",
        {
            "model_checkpoint_repo": "nvidia/GLM-5-NVFP4",
            "sglang_settings": {"context_length": "256k", "ep_size": 3},
            "sglang_validate_probes": [PROBE | {"expect": "^\\s*$"}],
        },
        (
            'sglang_settings.context_length is "256k", more than the 202752 positions',
            "sglang_settings.ep_size is 3, which does not divide the 256 routed experts",
            'sglang_validate_probes[0].expect is "^\\\\s*$", which only blank text matches',
        ),
        (),
    ),
    "bad-router": (
        "sglang_router",
        {"sglang_router_admin_key": "short:hidden-3", "sglang_router_host": "http://0.0.0.0"},
        ("sglang_router_admin_key is shorter than 16", "holds a colon", "sglang_router_host must be a host"),
        ("hidden-3",),
    ),
}


def run_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str, bad: bool = False) -> Any:
    inventory = yaml.safe_load(FIXTURE.read_text())
    if bad:
        children = inventory["all"]["children"]
        for host, (group, values, _, _) in BAD.items():
            if group == "sglang_router":  # one router host (the inventory contract): the bad one
                children[group]["hosts"].clear()
            children[group]["hosts"][host] = values
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")
    return ansible_playbook("-i", str(tmp_path / "hosts.yml"), "playbooks/inputs.yml", *args)


def refusals(stdout: str) -> dict[str, str]:
    """host -> the message of its failed task."""
    decoder, found = json.JSONDecoder(), {}
    for match in re.finditer(r"fatal: \[([^\]]+)\]: FAILED! => ", stdout):
        result, _ = decoder.raw_decode(stdout[match.end() :])
        found[match.group(1)] = json.dumps(result.get("msg"))
    return found


def test_the_lab_like_fleet_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done = run_inputs(tmp_path, monkeypatch)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_each_bad_host_is_refused_naming_its_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = run_inputs(tmp_path, monkeypatch, "-vvv", bad=True)
    assert done.returncode == 2, done.stdout[-4000:] + done.stderr[-2000:]
    found = refusals(done.stdout)
    assert set(found) == set(BAD), found
    for host, (_, _, words, _) in BAD.items():
        for word in words:
            assert json.dumps(word)[1:-1] in found[host], f"{host}: {word!r} not in {found[host]}"
    output = done.stdout + done.stderr
    for host, (_, _, _, hidden) in BAD.items():
        for value in hidden:
            assert value not in output, f"{host}: {value!r} in the -vvv output"


def test_a_fleet_lock_input_of_the_wrong_type_is_refused_with_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fleet_lock is among the roles whose argument specs the inputs play checks: a bad value is refused
    there, in the first play, before the lock is taken and before any host changes."""
    inventory = yaml.safe_load(FIXTURE.read_text())
    inventory["all"]["children"]["sglang_nodes"]["hosts"]["bad-lock"] = {"fleet_lock_break": "maybe"}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")
    done = ansible_playbook("-i", str(tmp_path / "hosts.yml"), "playbooks/inputs.yml")
    assert done.returncode == 2, done.stdout[-4000:] + done.stderr[-2000:]
    assert "failed: [bad-lock] (item=fleet_lock)" in done.stdout, done.stdout[-4000:]
    assert "argument 'fleet_lock_break' is of type str" in done.stdout, done.stdout[-4000:]


# --- the inventory contract: the first play, on the controller ----------------------------------------------

# An inventory whose groups have other names, of hosts that do not exist (TEST-NET-1, RFC 5737): the check
# runs on the controller before any play on a group, so no host is ever contacted.
MISNAMED = {
    "all": {
        "vars": {"ansible_connection": "ssh", "ansible_user": "nobody", "ansible_ssh_timeout": 1},
        "children": {
            "gpu_nodes": {
                "hosts": {f"gpu{i:02}": {"ansible_host": f"192.0.2.{i + 10}"} for i in range(1, 9)}
            },
            "routers": {"hosts": {"gw01": {"ansible_host": "192.0.2.9"}}},
        },
    }
}
EXPECTED = (
    "inventory: groups sglang_nodes and sglang_router are missing or empty; the run needs sglang_nodes (the "
    "GPU nodes) and sglang_router (the router host). This inventory has groups: gpu_nodes (8 hosts), "
    "routers (1 host). See README 'Production inventory'."
)


@pytest.mark.parametrize("limit", [(), ("--limit", "gpu03")])
def test_site_refuses_an_inventory_without_its_groups_before_any_play(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: tuple[str, ...]
) -> None:
    """Issue 41: such an inventory printed "skipping: no hosts matched" 17 times and returned 0. Now the first
    play refuses it, naming the groups it needs and the ones it has, on localhost (or, under --limit, which
    leaves localhost out, on the first host of the limit, without connecting to it)."""
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(MISNAMED, sort_keys=False))
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")
    done = ansible_playbook("-i", str(tmp_path / "hosts.yml"), "site.yml", "--check", *limit)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-4000:]
    (message,) = refusals(done.stdout).values()
    assert json.loads(message) == [EXPECTED]
    assert "no hosts matched" not in output and "UNREACHABLE" not in output
    assert output.count("PLAY [") == 1, output[-4000:]


def test_a_stage_alone_refuses_it_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stages that run alone without inputs.yml start with the same check (the router optional there)."""
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(MISNAMED, sort_keys=False))
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")
    for playbook in (
        "serve.yml",
        "validate.yml",
        "provision.yml",
        "monitoring.yml",
        "bench.yml",
        "router.yml",
    ):
        done = ansible_playbook("-i", str(tmp_path / "hosts.yml"), f"playbooks/{playbook}", "--check")
        assert done.returncode == 2, f"{playbook}: {done.stdout[-3000:]}"
        (message,) = refusals(done.stdout).values()
        assert "group" in message and "sglang_nodes" in message and "gpu_nodes (8 hosts)" in message, playbook
        assert ("sglang_router (the router host)" in message) == (playbook == "router.yml"), playbook


def run_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inventory: dict, *args: str) -> Any:
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")
    return ansible_playbook("-i", str(tmp_path / "hosts.yml"), "playbooks/groups.yml", *args)


def test_the_router_host_is_required_only_where_the_run_routes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = yaml.safe_load(FIXTURE.read_text())
    assert run_groups(tmp_path, monkeypatch, inventory, "-e", "glm5_router_required=true").returncode == 0
    del (
        inventory["all"]["children"]["sglang_router"],
        inventory["all"]["children"]["lab"]["children"]["sglang_router"],
    )
    assert run_groups(tmp_path, monkeypatch, inventory).returncode == 0
    done = run_groups(tmp_path, monkeypatch, inventory, "-e", "glm5_router_required=true")
    assert done.returncode == 2
    (message,) = refusals(done.stdout).values()
    assert "group sglang_router is missing or empty" in message


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda c: c["sglang_router"]["hosts"].update({"gw2": None}), "group sglang_router has 2 hosts"),
        (lambda c: c.update({"SGLANG_NODES": {"hosts": {"gpu-node-1": None}}}), "group SGLANG_NODES is not"),
        (
            lambda c: c.update({"sglang_replica_x": {"hosts": {"gpu-node-1": None, "lab-gateway": None}}}),
            "group sglang_replica_x has lab-gateway, not in sglang_nodes",
        ),
        (
            lambda c: c["sglang_nodes"]["hosts"].update(
                {"gpu-node-9": {"ansible_host": "glm5-lab-gpu-node-1"}}
            ),
            "gpu-node-1 and gpu-node-9 reach one machine",
        ),
        (
            lambda c: c["sglang_nodes"]["hosts"]["gpu-node-2"].update(
                {"sglang_server_advertise_host": "127.0.0.1"}
            ),
            "gpu-node-2's address is '127.0.0.1'",
        ),
    ],
)
def test_the_contract_s_refusals_through_the_play(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Any, words: str
) -> None:
    inventory = yaml.safe_load(FIXTURE.read_text())
    # The fixture's hosts are local (the controller); the contract's machines are reached over ssh.
    inventory["all"]["vars"]["ansible_connection"] = "ssh"
    change(inventory["all"]["children"])
    done = run_groups(tmp_path, monkeypatch, inventory)
    assert done.returncode == 2, done.stdout[-3000:]
    (message,) = refusals(done.stdout).values()
    assert words in json.loads(message)[0], message


def test_every_port_a_host_binds_is_checked_together_whatever_its_roles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU node that is also the router host and a Prometheus host: the server's, the edge's, smg's
    upstream, the router's and the guard's metrics ports and Prometheus's own, each against the others, with
    the roles' defaults for those the inventory does not set, a port given as a string as a number."""
    inventory = yaml.safe_load(FIXTURE.read_text())
    children = inventory["all"]["children"]
    children["sglang_router"]["hosts"] = {
        "gpu-node-1": {"sglang_router_metrics_port": "30001", "sglang_guard_metrics_port": 9090}
    }
    children["prometheus"] = {"hosts": {"gpu-node-1": None}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    monkeypatch.setenv("ANSIBLE_CALLBACK_RESULT_FORMAT", "json")
    done = ansible_playbook("-i", str(tmp_path / "hosts.yml"), "playbooks/inputs.yml")
    assert done.returncode == 2, done.stdout[-4000:]
    found = refusals(done.stdout)
    assert set(found) == {"gpu-node-1"}, found
    for words in (
        "sglang_router_port and sglang_server_port are both 30000 on one host",
        "sglang_router_metrics_port and sglang_router_upstream_port are both 30001 on one host",
        "Prometheus's own port (9090, its default --web.listen-address) and sglang_guard_metrics_port are "
        "both 9090 on one host",
    ):
        assert json.dumps(words)[1:-1] in found["gpu-node-1"], found["gpu-node-1"]
