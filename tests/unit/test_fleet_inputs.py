"""The input checks of module_utils/inputs_*.py: each problem names the variable, fine inputs pass."""

from __future__ import annotations

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_keys import (
    edge_key_problems,
    edge_tls_problems,
    fleet_key_problems,
    key_sharing_problems,
    pem_problems,
    secret_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_network import (
    bind_problems,
    connect_host,
    is_loopback,
    port_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_nodes import (
    gpu_problems,
    lost_gpu_problems,
    os_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_values import (
    spec_inputs,
)
from hypothesis import given
from hypothesis import strategies as st


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback_addresses(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "gpu-node-1", "", "fe80::1"])
def test_other_addresses_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(
    ("bind", "url_host"),
    [
        ("0.0.0.0", "127.0.0.1"),
        ("::", "[::1]"),
        ("", "127.0.0.1"),
        ("10.0.0.5", "10.0.0.5"),
        ("gpu-node-1", "gpu-node-1"),
        ("fd00::5", "[fd00::5]"),
        ("[fd00::5]", "[fd00::5]"),
    ],
)
def test_connect_host(bind: str, url_host: str) -> None:
    assert connect_host(bind) == url_host


def test_ports_in_range_and_distinct_pass() -> None:
    assert port_problems({"sglang_server_port": 30000, "sglang_server_dist_port": "20000"}) == []


# "¹": str.isdigit() accepts a superscript digit, int() does not (found by hypothesis in inventory_contract).
@pytest.mark.parametrize("value", [0, 65536, -1, "thirty", True, None, 3.5, "¹", "2²"])
def test_a_bad_port_names_its_variable(value: object) -> None:
    (problem,) = port_problems({"sglang_server_port": value})
    assert problem.startswith("sglang_server_port must be a port number (1-65535)")


def test_a_shared_port_names_both_variables() -> None:
    (problem,) = port_problems({"sglang_router_port": 30000, "sglang_router_metrics_port": 30000})
    assert "sglang_router_metrics_port and sglang_router_port are both 30000" in problem


@pytest.mark.parametrize("other", ["30001", " 30001 ", "030001", 30001])
def test_a_port_given_as_a_string_is_the_same_port(other: object) -> None:
    """The inventory's YAML or an extra var (-e) gives a string; the service binds the number."""
    (problem,) = port_problems({"sglang_router_upstream_port": 30001, "sglang_router_metrics_port": other})
    assert "sglang_router_metrics_port and sglang_router_upstream_port are both 30001" in problem


@given(
    st.dictionaries(st.text(min_size=1, max_size=8), st.integers(min_value=1, max_value=65535), max_size=6)
)
def test_distinct_valid_ports_never_trip(ports: dict[str, int]) -> None:
    distinct = {name: port for port, name in {v: k for k, v in ports.items()}.items()}
    assert port_problems(distinct) == []


def test_open_bind_without_key_is_refused_naming_both() -> None:
    (problem,) = bind_problems("0.0.0.0", "", host_var="sglang_server_host", key_var="sglang_server_api_key")
    assert "sglang_server_host is '0.0.0.0'" in problem and "sglang_server_api_key is empty" in problem


@pytest.mark.parametrize(
    ("bind", "key"), [("127.0.0.1", ""), ("localhost", ""), ("10.0.0.5", "k"), ("::", "k")]
)
def test_loopback_or_keyed_binds_pass(bind: str, key: str) -> None:
    assert bind_problems(bind, key, host_var="h", key_var="k") == []


@pytest.mark.parametrize(
    ("gpus", "tp", "words"),
    [
        (8, 16, "has 8 GPU(s) but preflight_tp_size is 16"),
        (8, 3, "does not divide the 8 GPU(s)"),
        (8, 0, "must be at least 1"),
    ],
)
def test_gpu_problems(gpus: int, tp: int, words: str) -> None:
    (problem,) = gpu_problems(gpus, tp, host="gpu-node-1", var="preflight_tp_size")
    assert words in problem and "preflight_tp_size" in problem


@pytest.mark.parametrize(("gpus", "tp"), [(8, 8), (8, 4), (8, 1), (4, 2), (1, 1)])
def test_divisors_fit(gpus: int, tp: int) -> None:
    assert gpu_problems(gpus, tp, host="h", var="v") == []


SM120_8 = {"count": 8, "arch": "sm120"}


@pytest.mark.parametrize(
    ("now", "words"),
    [
        ({"count": 7, "arch": "sm120"}, "sees 7 GPU(s) where it was deployed with 8"),
        ({"count": 0, "arch": ""}, "sees 0 GPU(s)"),
        ({"count": 8, "arch": "sm100"}, "architecture sm100 where it was deployed on sm120"),
    ],
)
def test_a_node_that_lost_a_gpu_is_refused_before_it_leaves_the_router(now: dict, words: str) -> None:
    problems = lost_gpu_problems(now, SM120_8, host="gpu-node-1")
    assert problems and words in problems[0] and "gpu-node-1" in problems[0]
    assert "was not taken out of the router" in " ".join(problems)


@pytest.mark.parametrize("recorded", [None, {}])
def test_no_record_nothing_to_compare(recorded: dict | None) -> None:
    assert lost_gpu_problems({"count": 1, "arch": "sm120"}, recorded, host="h") == []


@pytest.mark.parametrize("recorded", [None, SM120_8])
def test_fewer_gpus_than_the_tp_share_are_refused_with_or_without_a_record(recorded: dict | None) -> None:
    (problem,) = lost_gpu_problems({"count": 7, "arch": "sm120"}, recorded, host="h", tp_size=8)
    assert "sees 7 GPU(s)" in problem and "not taken out of the router" in problem
    assert lost_gpu_problems({"count": 8, "arch": "sm120"}, None, host="h", tp_size=8) == []


@pytest.mark.parametrize("now", [SM120_8, {"count": 16, "arch": "sm120"}])
def test_the_same_or_more_gpus_pass(now: dict) -> None:
    assert lost_gpu_problems(now, SM120_8, host="h") == []


def test_os_support() -> None:
    supported = ["debian12", "ubuntu2204", "ubuntu2404"]
    assert os_problems("Debian", "12", supported, host="n") == []
    assert os_problems("Ubuntu", "24.04", supported, host="n") == []
    (problem,) = os_problems("Rocky", "9", supported, host="n")
    assert "n runs Rocky 9 (rocky9)" in problem and "preflight_supported_os" in problem


SPEC = {
    "sglang_server_port": {"type": "int"},
    "sglang_server_api_key": {"type": "str", "no_log": True},
    "sglang_server_user": {"type": "str"},
}


def test_spec_inputs_keep_the_operators_values_without_secrets() -> None:
    given_values = {"sglang_server_port": "30001", "sglang_server_api_key": "k3y", "unrelated": 1}
    assert spec_inputs(SPEC, given_values) == {"sglang_server_port": "30001"}


def test_a_secret_that_is_not_a_string_is_named_without_its_value() -> None:
    (problem,) = secret_problems(SPEC, {"sglang_server_api_key": {"nested": "hunter2"}})
    assert "sglang_server_api_key must be a string" in problem and "hunter2" not in problem
    assert secret_problems(SPEC, {"sglang_server_api_key": "k3y"}) == []
    assert secret_problems(SPEC, {"sglang_server_api_key": None}) == []


# --- the filters that use these checks --------------------------------------------------------------------


def _filters(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "plugins" / "filter" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"glm5_filter_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


HOSTVARS = {
    "gpu-node-1": {"ansible_host": "10.0.0.11"},
    "gpu-node-2": {"sglang_server_advertise_host": "gpu-node-2.internal", "sglang_server_port": 30001},
    "gpu-node-3": {"sglang_server_host": "0.0.0.0"},
}


@pytest.mark.parametrize(
    ("host", "bind", "url"),
    [
        ("gpu-node-1", "10.0.0.11", "http://10.0.0.11:30000"),
        ("gpu-node-2", "gpu-node-2.internal", "http://gpu-node-2.internal:30001"),
        ("gpu-node-3", "0.0.0.0", "http://127.0.0.1:30000"),
    ],
)
def test_the_server_binds_to_its_node_address_unless_told(host: str, bind: str, url: str) -> None:
    filters = _filters("topology")
    assert filters["sglang_server_bind_host"](HOSTVARS, host) == bind
    assert filters["sglang_server_local_url"](HOSTVARS, host) == url


def test_settings_that_are_not_a_mapping_are_refused_by_name() -> None:
    from ansible.errors import AnsibleFilterError

    profile = _filters("sglang")["sglang_profile"]
    with pytest.raises(AnsibleFilterError, match="sglang_settings must be a mapping, got a str"):
        profile("cpu", "current", "tp_size=8")
    with pytest.raises(AnsibleFilterError, match="sglang_environment must be a mapping"):
        profile("cpu", "current", {}, ["A=1"])


def test_checkpoint_problems() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.inputs_nodes import (
        checkpoint_problems,
    )

    assert checkpoint_problems("nvidia/GLM-5-NVFP4", "a" * 40) == []
    (repo,) = checkpoint_problems("GLM-5-NVFP4", "a" * 40)
    assert repo == 'model_checkpoint_repo must be a Hugging Face repository, org/name; got "GLM-5-NVFP4"'
    (revision,) = checkpoint_problems("nvidia/GLM-5-NVFP4", "  ")
    assert revision.startswith("model_checkpoint_revision is empty")
    assert checkpoint_problems("", "", source_path="/mnt/nfs/glm5") == []


def test_two_doors_with_one_key_are_refused_naming_both_and_never_the_value() -> None:
    keys = {
        "sglang_server_api_key": ["node-key-0123456789", "shared-0123456789"],
        "sglang_server_admin_api_key": ["shared-0123456789"],
        "sglang_router_admin_key": ["router-admin-0123456789"],
    }
    (problem,) = key_sharing_problems(keys)
    assert "sglang_server_api_key" in problem and "sglang_server_admin_api_key" in problem
    assert "shared-0123456789" not in problem and "one door" in problem


def test_distinct_or_empty_keys_pass() -> None:
    keys = {
        "sglang_server_api_key": ["b-0123456789"],
        "sglang_server_admin_api_key": [""],
        "sglang_router_admin_key": ["", "c-0123456789"],
    }
    assert key_sharing_problems(keys) == []


@given(st.lists(st.sampled_from(["k1", "k2", "k3", ""]), min_size=4, max_size=4))
def test_a_problem_for_every_pair_sharing_a_value(values: list[str]) -> None:
    names = ["w", "x", "y", "z"]
    problems = key_sharing_problems({n: [v] for n, v in zip(names, values, strict=True)})
    pairs = [(a, b) for i, a in enumerate(values) for b in values[i + 1 :] if a and a == b]
    assert len(problems) == len(pairs)


def test_the_edges_keys_must_be_tokens_nginx_cannot_misread() -> None:
    """The edge writes the clients' keys and the nodes' key into its nginx configuration as header strings."""
    assert edge_key_problems({"sglang_router_api_key": ["a-Z_0.9~+/="], "sglang_server_api_key": [""]}) == []
    for bad in ('quote"d-0123456789', "dollar$var-0123456789", "semi;colon-0123456789", "back\\slash-0123"):
        (problem,) = edge_key_problems({"sglang_server_api_key": ["ok-0123456789", bad]})
        assert problem.startswith("sglang_server_api_key holds a character") and bad not in problem
    # The admin keys never reach nginx: any printable key is theirs to choose.
    assert edge_key_problems({"sglang_router_admin_key": ['quote"d-0123456789']}) == []


PEM_CERT = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----\n"
PEM_KEY = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49\n-----END PRIVATE KEY-----"


def test_pem_variables_take_pem_text_and_their_errors_never_show_the_value() -> None:
    assert pem_problems("sglang_router_tls_certificate", PEM_CERT + PEM_CERT) == []
    assert pem_problems("sglang_router_tls_private_key", PEM_KEY) == []
    assert pem_problems("sglang_router_ca_bundle", "") == []
    (wrong,) = pem_problems("sglang_router_tls_certificate", PEM_KEY)
    assert "CERTIFICATE" in wrong and "MIGH" not in wrong
    (junk,) = pem_problems("sglang_router_tls_private_key", PEM_KEY + "\nsecret-junk")
    assert "secret-junk" not in junk
    assert pem_problems("sglang_router_ca_bundle", ["x"]) == [
        "sglang_router_ca_bundle must be PEM text, got a list"
    ]


def test_the_fleets_key_rules_come_together() -> None:
    keys = {
        "sglang_router_api_key": ["node-0123456789"],
        "sglang_server_api_key": ["node-0123456789"],
        "sglang_server_admin_api_key": ["node$0123456789"],
        "sglang_router_admin_key": ["node$0123456789"],
    }
    problems = fleet_key_problems(keys)
    assert len(problems) == 2 and all("one door" in p for p in problems), problems
    first = problems[0]
    assert "sglang_router_api_key (the clients' key" in first and "sglang_server_api_key (" in first
    (token,) = fleet_key_problems({"sglang_router_api_key": ['client"key-0123456789']})
    assert token.startswith("sglang_router_api_key holds a character")
    assert fleet_key_problems({}) == []


def test_the_edge_speaks_tls_or_plain_http_only_when_the_inventory_says_so() -> None:
    """No silent plain text (issue 41): an edge without a certificate and its key is refused unless
    sglang_router_edge_plain_http is true; the message names the variables and both ways out, never a
    value."""
    assert edge_tls_problems(PEM_CERT, PEM_KEY, False) == []
    assert edge_tls_problems("", "", True) == []
    assert edge_tls_problems("", "", "yes") == []  # an inventory's YAML 1.1 spelling, as Ansible reads it
    (refused,) = edge_tls_problems("", "", False, port=8443)
    for words in (
        "sglang_router_tls_certificate and sglang_router_tls_private_key are empty",
        "sglang_router_edge_plain_http is false",
        "plain HTTP on sglang_router_port (8443)",
        "set sglang_router_edge_plain_http: true",
    ):
        assert words in refused, refused
    assert edge_tls_problems(None, None, "false") == [refused.replace("8443", "30000")]
    # Half a pair: a key without its certificate would be plain HTTP without a word; a certificate without
    # its key, an nginx that does not start.
    (no_cert,) = edge_tls_problems("", PEM_KEY, False)
    assert no_cert.startswith(
        "sglang_router_tls_private_key is set but sglang_router_tls_certificate is empty"
    )
    (no_key,) = edge_tls_problems(PEM_CERT, "  ", True)
    assert no_key.startswith(
        "sglang_router_tls_certificate is set but sglang_router_tls_private_key is empty"
    )
    # A pair and plain HTTP asked for: the two say different things.
    (both,) = edge_tls_problems(PEM_CERT, PEM_KEY, True)
    assert "sglang_router_edge_plain_http is true, but" in both
    for problem in (refused, no_cert, no_key, both):
        assert "MIIB" not in problem and "MIGH" not in problem


def test_one_call_returns_every_problem_of_a_host_at_once() -> None:
    """Filter sglang_input_problems (roles/preflight/tasks/inputs.yml): a node with a bad port, an open bind,
    an unpinned checkpoint and a setting the roles own hears of all four at once;
    a fine node of none."""
    from ansible_collections.glm5.deploy.plugins.filter.inputs import sglang_input_problems, sglang_role_specs

    specs = sglang_role_specs(["sglang_server", "model_checkpoint", "sglang"])
    units = {"sglang_server_port": "sglang_server/templates/sglang.service.j2"}
    groups = {"all": ["bad", "good"], "sglang_nodes": ["bad", "good"]}
    hostvars = {
        "bad": {
            "sglang_server_host": "0.0.0.0",
            "model_checkpoint_revision": "",
            "sglang_settings": {"port": 1234},
        },
        "good": {
            "sglang_server_api_key": "k" * 32,
            "sglang_server_admin_api_key": "a" * 32,
            "model_checkpoint_revision": "0" * 40,
        },
    }

    def problems(host: str, port: int) -> list[str]:
        return sglang_input_problems(
            hostvars, host, ["sglang_nodes"], groups, specs, {"sglang_server_port": port}, units, first=False
        )

    found = problems("bad", 80)
    assert [p.split(" ", 1)[0] for p in found][:2] == ["sglang_server_port", "sglang_server_host"], found
    assert any("model_checkpoint_revision" in p for p in found), found
    assert any("sglang_settings" in p and "port" in p for p in found), found
    assert problems("good", 30000) == []
