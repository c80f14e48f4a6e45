"""Inputs mean what they say (module_utils/inputs_*.py): sglang_settings the roles own or sglang would
misread, sglang's ranges, ports below 1024, secrets, URLs, one-line values, hosts, probes, durations. Each
problem names the variable with its path; a secret or a URL's credentials never show."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_keys import (
    admin_key_problems,
    secret_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_network import (
    grants_low_ports,
    low_port_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_settings import (
    ROLE_OWNED_SETTINGS,
    model_limit_problems,
    setting_number,
    settings_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_values import (
    EXPECT_SAMPLES,
    PROBE_MAX_TOKENS,
    environment_problems,
    expect_problems,
    host_problems,
    line_problems,
    number_problems,
    probe_problems,
    url_problems,
    value_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import setting_dests
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]


def settings(values: dict[str, Any], **kwargs: Any) -> list[str]:
    """settings_problems with the real flag tables' aliases, as the filter passes them."""
    return settings_problems(values, dests={key: setting_dests(key) for key in values}, **kwargs)


# --- sglang_settings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "pointer"),
    [
        ("host", "set sglang_server_host"),
        ("port", "set sglang_server_port"),
        ("model_path", "set sglang_server_model_path"),
        ("served_model_name", "set sglang_server_served_model_name"),
        ("api_key", "set sglang_server_api_key"),
        ("admin_api_key", "sglang_server_admin_api_key"),
        ("config", "--config itself"),
        ("nnodes", "sglang_replica_<name>"),
        ("node_rank", "sglang_replica_<name>"),
        ("dist_init_addr", "sglang_server_dist_port"),
    ],
)
def test_a_key_the_role_owns_points_at_its_variable(key: str, pointer: str) -> None:
    (problem,) = settings({key: "x-not-shown"})
    assert problem.startswith(f"sglang_settings.{key}: the role owns this; ") and pointer in problem
    assert "x-not-shown" not in problem


def test_the_brief_s_example_reads_as_written() -> None:
    assert settings({"host": "0.0.0.0"}) == [
        "sglang_settings.host: the role owns this; set sglang_server_host"
    ]


@pytest.mark.parametrize(
    ("alias", "dest"),
    [("model", "model_path"), ("nccl_init_addr", "dist_init_addr"), ("tensor_parallel_size", None)],
)
def test_an_alias_of_an_owned_flag_is_owned_too(alias: str, dest: str | None) -> None:
    problems = settings({alias: "/models/other"})
    if dest is None:  # tp_size is the operator's; "/models/other" is not a number, left to sglang's parser
        assert problems == []
    else:
        (problem,) = problems
        assert problem.startswith(f"sglang_settings.{alias}: the role owns this (it sets {dest}); ")


def test_every_owned_dest_is_a_flag_of_every_release() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import load_dialects

    # TLS from the router to the nodes came after sglang 0.5.9 (sgl-project/sglang#18973, merged
    # 2026-02-18): the seed lane has no --ssl-* flags, and a node with a TLS certificate on it is refused when
    # its flags are rendered.
    tls = {"ssl_certfile", "ssl_keyfile", "ssl_ca_certs"}
    for version, dialect in load_dialects().items():
        dests = {spec.get("dest") for spec in dialect["flags"].values()}
        assert set(ROLE_OWNED_SETTINGS) - tls <= dests, version
        assert tls <= dests or version in ("0.5.8.post1", "0.5.9"), version


def test_the_roles_render_what_they_own() -> None:
    """ROLE_OWNED_SETTINGS is what roles/sglang_server renders itself (and the replica's three flags)."""
    server_vars = yaml.safe_load((ROOT / "roles" / "sglang_server" / "vars" / "main.yml").read_text())
    rendered = set(server_vars["__sglang_server_node_settings"]) | {"nnodes", "node_rank", "dist_init_addr"}
    assert rendered <= set(ROLE_OWNED_SETTINGS)
    unit = (ROOT / "roles" / "sglang_server" / "templates" / "sglang.service.j2").read_text()
    assert "--config" in unit and {"config", "api_key", "admin_api_key"} <= set(ROLE_OWNED_SETTINGS)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"cuda_graph_bs_decode": [1, "--host", "0.0.0.0"]}, "sglang_settings.cuda_graph_bs_decode[1]"),
        ({"tool_call_parser": "--api-key=x"}, "sglang_settings.tool_call_parser"),
        ({"tool_call_parser": "-x"}, "sglang_settings.tool_call_parser"),
        ({"lora_paths": ["a=/x", "--"]}, "sglang_settings.lora_paths[1]"),
    ],
)
def test_a_value_that_would_be_a_flag_of_its_own_is_refused(values: dict[str, Any], where: str) -> None:
    (problem,) = settings(values)
    assert problem.startswith(f"{where} is ") and "begins with a dash" in problem


@pytest.mark.parametrize("value", [-1, "-1", "-0.5", [1, -2]])
def test_negative_numbers_are_values_not_flags(value: Any) -> None:
    assert settings({"random_seed": value}) == []


def test_a_value_with_a_line_break_is_refused() -> None:
    (problem,) = settings({"tool_call_parser": "glm47\nExecStartPre=/bin/true"})
    assert problem.startswith("sglang_settings.tool_call_parser holds a line break")
    (item,) = settings({"cuda_graph_bs_decode": [1, "2\n"]})
    assert item.startswith("sglang_settings.cuda_graph_bs_decode[1] holds a line break")


@pytest.mark.parametrize("value", [0, 1.5, -0.1, "2", "0"])
def test_a_fraction_outside_0_1_is_refused(value: Any) -> None:
    (problem,) = settings({"mem_fraction_static": value})
    assert problem.startswith("sglang_settings.mem_fraction_static must be a fraction in (0, 1]")


@pytest.mark.parametrize("value", [0.88, 1, "0.5", 1.0])
def test_fractions_in_range_pass(value: Any) -> None:
    assert settings({"mem_fraction_static": value, "swa_full_tokens_ratio": value}) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("max_running_requests", 0),
        ("context_length", -4096),
        ("max_total_tokens", "0"),
        ("tp_size", 0),
        ("tensor_parallel_size", -8),
        ("cuda_graph_max_bs_decode", 0),
        ("chunked_prefill_size", 0),
        ("chunked_prefill_size", -2),
    ],
)
def test_sizes_and_counts_must_be_positive(key: str, value: Any) -> None:
    (problem,) = settings({key: value})
    assert problem.startswith(f"sglang_settings.{key} must be positive")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("chunked_prefill_size", -1),  # sglang: -1 turns chunked prefill off
        ("context_length", "128k"),  # sglang's human-readable ints
        ("max_total_tokens", "1Mi"),
        ("max_running_requests", "plenty"),  # not a number: sglang's parser refuses it (molecule rollback)
        ("max_running_requests", 4),
        ("dsa_decode_backend", "trtllm"),
        ("json_model_override_args", {"rope_scaling": {"factor": -1}}),
        ("enable_metrics", True),
    ],
)
def test_good_settings_and_what_sglang_judges_itself_pass(key: str, value: Any) -> None:
    assert settings({key: value}) == []


def test_null_removes_a_setting_and_is_never_judged() -> None:
    assert settings({"host": None, "mem_fraction_static": None}) == []


@pytest.mark.parametrize(
    ("text", "number"),
    [("128k", 128e3), ("25.6k", 25600), ("1Ki", 1024), ("4", 4), ("x", None), ("1Kb", None)],
)
def test_setting_numbers_read_as_sglang_reads_them(text: str, number: float | None) -> None:
    assert setting_number(text) == number


def test_tp_size_over_the_replica_and_preflight() -> None:
    assert settings({"tp_size": 16}, nnodes=2, replica="tp16", preflight_tp_size=8) == []
    assert settings({"tp_size": 8}, preflight_tp_size=8) == []
    assert settings({"tp_size": 4}, preflight_tp_size=8) == []  # preflight asks for more GPUs: not wrong
    (uneven,) = settings({"tp_size": 3}, nnodes=2, replica="pair", preflight_tp_size=8)
    assert "sglang_settings.tp_size is 3" in uneven and "sglang_replica_pair" in uneven
    (above,) = settings({"tp_size": 16}, preflight_tp_size=8)
    assert "runs 16 ranks" in above and "set preflight_tp_size to 16" in above


def test_settings_that_are_not_a_mapping_are_left_to_the_spec() -> None:
    assert settings_problems("tp_size=8") == []
    assert settings_problems(None) == []


@given(
    st.dictionaries(
        st.text(max_size=12),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
            lambda inner: (
                st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=6,
        ),
        max_size=5,
    )
)
def test_settings_problems_never_raise(values: dict[str, Any]) -> None:
    assert isinstance(settings_problems(values, nnodes=2, preflight_tp_size=8), list)


# --- settings whose limit the checkpoint's configuration sets ----------------------------------------------


def limits(values: dict[str, Any], repo: str = "nvidia/GLM-5-NVFP4", env: dict | None = None) -> list[str]:
    dests = {key: setting_dests(key) for key in values}
    return model_limit_problems(values, repo, env, dests=dests)


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (
            {"context_length": 262144},
            "sglang_settings.context_length is 262144, more than the 202752 positions",
        ),
        ({"context_length": "256k"}, 'sglang_settings.context_length is "256k", more than the 202752'),
        ({"tp_size": 24}, "sglang_settings.tp_size is 24: nvidia/GLM-5-NVFP4's 64 attention heads"),
        ({"tensor_parallel_size": 12}, "sglang_settings.tensor_parallel_size is 12"),
        ({"tp_size": 48, "dp_size": 2, "enable_dp_attention": True}, "tp_size / dp_size (24)"),
        ({"ep_size": 3}, "sglang_settings.ep_size is 3, which does not divide the 256 routed experts"),
    ],
)
def test_settings_past_the_checkpoint_s_own_limits_are_refused(values: dict[str, Any], words: str) -> None:
    (problem,) = limits(values)
    assert words in problem and "sglang refuses to start" in problem, problem


@pytest.mark.parametrize(
    ("values", "repo", "env"),
    [
        ({"context_length": 202752, "tp_size": 16, "ep_size": 8}, "nvidia/GLM-5-NVFP4", None),
        ({"context_length": 131072}, "NVIDIA/glm-5-nvfp4", None),  # the hub's ids ignore case
        (
            {"context_length": 262144},
            "nvidia/GLM-5-NVFP4",
            {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
        ),
        (
            {"tp_size": 24, "dp_size": 3, "enable_dp_attention": True},
            "zai-org/GLM-5-FP8",
            None,
        ),  # 8 per group
        ({"context_length": 10**6, "tp_size": 24}, "glm5-lab/glm5-lab-tiny", None),  # not known: sglang's
        ({"tp_size": "eight", "context_length": None}, "nvidia/GLM-5-NVFP4", None),  # the parser's to judge
    ],
)
def test_settings_within_the_limits_or_of_another_model_pass(
    values: dict, repo: str, env: dict | None
) -> None:
    assert limits(values, repo, env) == []


@given(
    st.dictionaries(
        st.sampled_from(["context_length", "tp_size", "dp_size", "enable_dp_attention", "ep_size", "tp"]),
        st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats() | st.text(max_size=6),
        max_size=5,
    )
)
def test_model_limit_problems_never_raise(values: dict[str, Any]) -> None:
    assert isinstance(limits(values), list)


def test_the_filter_merges_the_service_environments() -> None:
    from importlib import import_module

    filters = import_module("ansible_collections.glm5.deploy.plugins.filter.inputs").FilterModule().filters()
    check = filters["sglang_model_limit_problems"]
    settings = {"context_length": 262144}
    assert check(settings, "nvidia/GLM-5-NVFP4", [{}, {}]) != []
    assert (
        check(settings, "nvidia/GLM-5-NVFP4", [{}, {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "true"}])
        == []
    )
    assert check("context_length=262144", "nvidia/GLM-5-NVFP4", None) == []  # the argument spec's


# --- ports below 1024 ---------------------------------------------------------------------------------------

UNITS = {
    "sglang_server_port": "sglang_server/templates/sglang.service.j2",
    "sglang_router_upstream_port": "sglang_router/templates/sglang-router.service.j2",
    "sglang_guard_metrics_port": "sglang_guard/templates/sglang-guard.service.j2",
}
# The edge (nginx, as root with CAP_NET_BIND_SERVICE): the clients' port, 443 in many sites.
EDGE = {"sglang_router_port": "sglang_router/templates/sglang-edge.service.j2"}


def test_preflight_knows_the_unit_of_every_port_it_checks() -> None:
    preflight = yaml.safe_load((ROOT / "roles" / "preflight" / "vars" / "main.yml").read_text())
    ports = set(preflight["__preflight_node_ports"]) | set(preflight["__preflight_router_ports"])
    assert set(preflight["__preflight_port_units"]) == ports
    for path in preflight["__preflight_port_units"].values():
        assert (ROOT / "roles" / path).is_file(), path


@pytest.mark.parametrize("path", sorted(set(UNITS.values())))
def test_no_unit_of_the_roles_grants_low_ports(path: str) -> None:
    """The rule's premise; a unit that grants CAP_NET_BIND_SERVICE would have its ports below 1024 allowed."""
    assert not grants_low_ports((ROOT / "roles" / path).read_text())


def test_the_edge_may_listen_on_443() -> None:
    units = {name: (f"roles/{path}", (ROOT / "roles" / path).read_text()) for name, path in EDGE.items()}
    assert grants_low_ports(units["sglang_router_port"][1])
    assert low_port_problems({"sglang_router_port": 443}, units) == []


@pytest.mark.parametrize(
    ("unit", "grants"),
    [
        ("[Service]\nUser=sglang\nCapabilityBoundingSet=\nAmbientCapabilities=\n", False),
        ("[Service]\nUser=sglang\n", False),
        ("[Service]\nUser=sglang\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n", True),
        (
            "[Service]\nDynamicUser=yes\nAmbientCapabilities=CAP_NET_BIND_SERVICE\nCapabilityBoundingSet=\n",
            False,
        ),
        ("[Service]\nExecStart=/bin/x\n", True),  # root, every capability
        ("[Service]\nCapabilityBoundingSet=~CAP_NET_BIND_SERVICE CAP_SYS_ADMIN\n", False),
        (
            "[Service]\nUser=x\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\n"
            "AmbientCapabilities=CAP_NET_BIND_SERVICE\n",
            True,
        ),
    ],
)
def test_grants_low_ports(unit: str, grants: bool) -> None:
    assert grants_low_ports(unit) is grants


def test_a_port_below_1024_is_refused_for_a_unit_without_the_capability() -> None:
    units = {name: (f"roles/{path}", (ROOT / "roles" / path).read_text()) for name, path in UNITS.items()}
    (problem,) = low_port_problems({"sglang_server_port": 80, "sglang_router_upstream_port": 30001}, units)
    assert problem.startswith("sglang_server_port is 80, below 1024")
    assert "CAP_NET_BIND_SERVICE" in problem and "roles/sglang_server/templates/sglang.service.j2" in problem
    assert low_port_problems({"sglang_router_upstream_port": "443"}, units)[0].startswith(
        "sglang_router_upstream_port is 443"
    )
    # Out of range or not a number: port_problems' to name; a port with no known unit is not judged.
    assert (
        low_port_problems(
            {"sglang_server_port": 0, "sglang_router_upstream_port": "x", "other_port": 80}, units
        )
        == []
    )
    granted = {"sglang_server_port": ("u", "[Service]\nAmbientCapabilities=CAP_NET_BIND_SERVICE\n")}
    assert low_port_problems({"sglang_server_port": 80}, granted) == []


# --- secrets -----------------------------------------------------------------------------------------------

SECRET_SPEC = {"sglang_server_api_key": {"type": "str", "no_log": True}}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("two words", "space, tab or line break"),
        ("key\n", "space, tab or line break"),
        ("k\u00e9y-not-shown", "outside printable ASCII"),
        ("bell\x07", "outside printable ASCII"),
    ],
)
def test_a_secret_is_printable_ascii_without_whitespace(value: str, words: str) -> None:
    (problem,) = secret_problems(SECRET_SPEC, {"sglang_server_api_key": value})
    assert problem.startswith("sglang_server_api_key must be printable ASCII without whitespace")
    assert words in problem and value not in problem and "not-shown" not in problem


@given(st.text(min_size=1, max_size=40))
def test_a_secret_is_never_in_its_problem(value: str) -> None:
    """Whatever the value, the problem is one of two fixed sentences, which cannot carry it."""
    fixed = {p for v in ("a b", "\u00e9") for p in secret_problems(SECRET_SPEC, {"sglang_server_api_key": v})}
    assert set(secret_problems(SECRET_SPEC, {"sglang_server_api_key": value})) <= fixed


def test_good_secrets_pass() -> None:
    for value in ("", "an-example-server-key-long-enough", "hf_AbC123~!@#$%^&*()_+={}[]|\\:;\"'<>,.?/"):
        assert secret_problems(SECRET_SPEC, {"sglang_server_api_key": value}) == []


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("", "is empty"),
        ("short-key", "shorter than 16"),
        ("glm5:lab:admin:key-long-enough", "holds a colon"),
    ],
)
def test_the_router_admin_key(key: str, words: str) -> None:
    problems = admin_key_problems(key, var="sglang_router_admin_key")
    assert any(words in p for p in problems) and all(
        p.startswith("sglang_router_admin_key ") for p in problems
    )
    assert all(key not in p for p in problems if key)
    assert admin_key_problems("an-example-admin-key-long-enough", var="k") == []
    assert admin_key_problems({"not": "a string"}, var="k") == []  # secret_problems names it


# --- URLs, hosts, one-line values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://user:pw-not-shown@mirror:8090",
        "https://token-pw-not-shown@mirror/simple",
        "user:pw-not-shown@mirror:8090",
        "ftp://a:pw-not-shown@mirror/",
    ],
)
def test_a_url_with_credentials_is_refused_without_showing_it(url: str) -> None:
    (problem,) = url_problems("model_checkpoint_hf_endpoint", url)
    assert problem.startswith("model_checkpoint_hf_endpoint carries a user name or password")
    assert "pw-not-shown" not in problem and "user:password@" in problem


@pytest.mark.parametrize(
    "name",
    [
        "model_checkpoint_hf_endpoint",
        "sglang_runtime_wheelhouse",
        "sglang_router_host",
        "sglang_router_workers",
    ],
)
def test_credentials_never_show_whatever_else_is_wrong(name: str) -> None:
    options = {name: {"type": "list" if name.endswith("workers") else "str"}}
    for value in ("http://u:pw-not-shown@h\n", "u:pw-not-shown@h:1 x", "ops:pw-not-shown@gpu-node-1"):
        given_value = [value] if name.endswith("workers") else value
        (problem,) = value_problems(options, {name: given_value})
        assert "user:password@" in problem and "pw-not-shown" not in problem


@given(st.from_regex(r"[a-z]{1,8}", fullmatch=True), st.from_regex(r"[A-Za-z0-9._~-]{4,20}", fullmatch=True))
def test_a_url_s_password_never_shows(user: str, password: str) -> None:
    for location in (False, True):
        problems = url_problems("x_url", f"http://{user}:{password}@host:1/p", directory_ok=location)
        assert problems and all(password not in p for p in problems)


@pytest.mark.parametrize(
    ("value", "directory_ok", "words"),
    [
        ("ftp://lab-gateway:8090", False, "must be an http(s) URL"),
        ("lab-gateway:8090", False, "must be an http(s) URL"),
        ("/srv/mirror", False, "must be an http(s) URL"),
        ("http://", False, "must be an http(s) URL"),
        ("http://host/a b", False, "holds whitespace"),
        ("ftp://host/wheels/", True, "http(s) or file:// URL, or an absolute directory"),
        ("wheels/", True, "an absolute directory"),
    ],
)
def test_a_url_has_an_http_scheme(value: str, directory_ok: bool, words: str) -> None:
    (problem,) = url_problems("v_url", value, directory_ok=directory_ok)
    assert problem.startswith("v_url ") and words in problem


@pytest.mark.parametrize(
    ("value", "directory_ok"),
    [
        ("", False),
        ("http://lab-gateway:8090", False),
        ("https://download.pytorch.org/whl/cu130", False),
        ("http://[fd00::5]:30000", False),
        ("http://lab-gateway:8080/wheels/smg-1.13.0/", True),
        ("file:///srv/wheels", True),
        ("/srv/wheels", True),
    ],
)
def test_good_urls_pass(value: str, directory_ok: bool) -> None:
    assert url_problems("v_url", value, directory_ok=directory_ok) == []


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ("gpu-node-1:30000", "host:port"),
        ("http://0.0.0.0", "a URL"),
        ("gpu node", "something else"),
        ("-gpu", "something else"),
        ("10.0.0.5/24", "something else"),
    ],
)
def test_a_host_is_a_host(value: str, what: str) -> None:
    (problem,) = host_problems("sglang_server_advertise_host", value, port_var="sglang_server_port")
    assert problem.startswith("sglang_server_advertise_host must be a host name or address")
    assert what in problem and "(the port is sglang_server_port)" in problem


@pytest.mark.parametrize(
    "value",
    ["", "gpu-node-1", "gpu-node-1.internal.example", "10.0.0.5", "0.0.0.0", "::", "fd00::5", "[::1]"],
)
def test_good_hosts_pass(value: str) -> None:
    assert host_problems("h", value) == []


@pytest.mark.parametrize("value", ["abc\n", "a\rb", "nul\x00"])
def test_a_one_line_value_has_no_line_break(value: str) -> None:
    (problem,) = line_problems("model_checkpoint_revision", value)
    assert problem.startswith("model_checkpoint_revision holds a line break")
    assert "\n" not in problem and "\r" not in problem


def test_a_repository_with_a_trailing_line_break_is_not_org_name() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.inputs_nodes import (
        checkpoint_problems,
    )

    (problem,) = checkpoint_problems("nvidia/GLM-5-NVFP4\n", "a" * 40)
    assert problem.startswith("model_checkpoint_repo must be a Hugging Face repository")


# --- durations, environments -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("sglang_server_health_timeout", 0, "must be positive"),
        ("model_checkpoint_poll_interval", "-5", "must be positive"),
        ("sglang_runtime_poll_interval", 0, "must be positive"),
        ("sglang_guard_fail_after", 0, "must be positive"),
        ("sglang_router_health_failure_threshold", 0, "must be positive"),
        ("sglang_router_circuit_breaker_failures", 0, "must be positive"),
        ("sglang_router_retry_backoff_ms", 0, "must be positive"),
        ("sglang_router_retries", -1, "must be 0 or more"),
        ("sglang_validate_retries", -1, "must be 0 or more"),
        ("sglang_validate_concurrency", 0, "must be positive"),
        ("sglang_validate_long_context_words", 49, "must be 0 (no long-context probe) or 50 words or more"),
        ("sglang_validate_long_context_words", -1, "must be 0 (no long-context probe) or 50 words or more"),
        ("sglang_validate_mid_length_words", 49, "must be 0 (no mid-length probe) or 50 words or more"),
        ("sglang_validate_prefix_reuse_words", 10, "must be 0 (no prefix-reuse probe) or 50 words or more"),
    ],
)
def test_durations_and_counts(name: str, value: Any, words: str) -> None:
    (problem,) = number_problems(name, value)
    assert problem.startswith(f"{name} {words}")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("sglang_validate_retries", 0),
        ("sglang_validate_long_context_words", 0),
        ("sglang_validate_long_context_words", 50),
        ("sglang_validate_mid_length_words", 0),
        ("sglang_validate_prefix_reuse_words", 2000),
        ("sglang_validate_concurrency", 64),
        ("sglang_server_health_timeout", 900),
        ("model_checkpoint_poll_interval", "10"),
        ("sglang_server_port", 0),  # not a duration: port_problems' to judge
        ("sglang_server_health_timeout", "soon"),  # not a number: the argument spec's to judge
    ],
)
def test_good_or_other_numbers_pass(name: str, value: Any) -> None:
    assert number_problems(name, value) == []


def test_a_service_environment() -> None:
    problems = environment_problems(
        "sglang_server_environment",
        {
            "OMP_NUM_THREADS": "1\nLD_PRELOAD=/tmp/x.so",
            "1BAD": "x",
            "HF_HUB_OFFLINE": "0",
            "NCCL_DEBUG": "INFO",
        },
    )
    assert problems == [
        "sglang_server_environment.OMP_NUM_THREADS holds a line break; an environment file's value is one "
        "line",
        "sglang_server_environment.1BAD is not an environment variable name (letters, digits, _)",
        "sglang_server_environment.HF_HUB_OFFLINE: the role owns this; the server reads only the checkpoint "
        "the model_checkpoint role verified",
    ]


def test_the_role_owns_the_environment_it_sets() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.inputs_values import (
        ROLE_OWNED_ENVIRONMENT,
    )

    server_vars = yaml.safe_load((ROOT / "roles" / "sglang_server" / "vars" / "main.yml").read_text())
    assert set(server_vars["__sglang_server_base_environment"]) == set(ROLE_OWNED_ENVIRONMENT)


# --- probes ------------------------------------------------------------------------------------------------

PROBE = {"name": "four", "prompt": "What is 2+2?", "max_tokens": 256}


def test_the_lab_probes_and_none_pass() -> None:
    lab = yaml.safe_load((ROOT / "lab" / "model" / "probes.yml").read_text())["probes"]
    assert probe_problems("sglang_validate_probes", lab) == []
    assert probe_problems("sglang_validate_probes", []) == []


@pytest.mark.parametrize(
    ("probes", "words"),
    [
        (
            [PROBE | {"expect": "([0-9]"}],
            "sglang_validate_probes[0].expect is not a valid regular expression",
        ),
        ([PROBE | {"max_tokens": PROBE_MAX_TOKENS + 1}], "sglang_validate_probes[0].max_tokens must be"),
        ([PROBE | {"max_tokens": 0}], "sglang_validate_probes[0].max_tokens must be a whole number from 1"),
        ([PROBE | {"max_tokens": "256"}], "sglang_validate_probes[0].max_tokens must be"),
        (
            [PROBE, PROBE],
            'sglang_validate_probes[1].name "four" is used twice (also sglang_validate_probes[0])',
        ),
        ([PROBE | {"prompt": " "}], "sglang_validate_probes[0].prompt is empty"),
        ([PROBE | {"name": ""}], "sglang_validate_probes[0].name must be a non-empty string"),
        (["2+2"], "sglang_validate_probes[0] must be a mapping"),
        ([{"name": "x"}], "sglang_validate_probes[0]: probe 'x' needs exactly one of 'prompt' or 'messages'"),
        ([PROBE | {"temperature": -1}], "sglang_validate_probes[0]: probe 'four': 'temperature' must be"),
    ],
)
def test_probe_problems(probes: list[Any], words: str) -> None:
    problems = probe_problems("sglang_validate_probes", probes)
    assert len(problems) == 1 and problems[0].startswith(words), problems


@pytest.mark.parametrize("expect", ["", ".*", "^", "(?:)", "4|", "x*", "[\\s\\S]*"])
def test_an_expect_every_answer_matches_judges_nothing(expect: str) -> None:
    (problem,) = probe_problems("sglang_validate_probes", [PROBE | {"expect": expect}])
    assert problem.startswith("sglang_validate_probes[0].expect is ") and "every answer matches" in problem


@pytest.mark.parametrize(
    "expect",
    ["^$", "^\\s*$", "\\A\\s+\\Z", "^(\\s|\\n)*$", "^[ \\t]*$", "(?i)^$", "^(?:\\s)+$", "^(?>\\s*)$"],
)
def test_an_expect_only_blank_text_matches_can_never_pass(expect: str) -> None:
    """The judge fails a blank answer before it reads expect (judge_verdict), so such a probe fails every
    replica, which the validate gate then reads as a suspect probe."""
    (problem,) = probe_problems("sglang_guard_probes", [PROBE | {"expect": expect}])
    assert problem.startswith("sglang_guard_probes[0].expect is ") and "only blank text matches" in problem


@pytest.mark.parametrize(
    "expect",
    [
        "^[^0-9]*(?:2[^0-9]+2[^0-9]+)?4[^0-9]*$",  # the seeds' 2+2
        "4",
        "^\\s+4",  # sglang 0.5.23 does not strip the content after </think>: a leading newline can be there
        "(?m)^\\s*$",  # a blank line inside an answer
        "^\\s*4\\s*$",
        "^$|4",
    ],
)
def test_an_expect_some_answers_match_and_others_not_passes(expect: str) -> None:
    assert probe_problems("sglang_validate_probes", [PROBE | {"expect": expect}]) == []


@given(st.text(max_size=12))
def test_expect_problems_never_raise_and_never_refuse_a_pattern_some_answer_passes(expect: str) -> None:
    """Whatever the text, a pattern refused as blank-only matches no non-blank sample answer."""
    try:
        compiled = re.compile(expect)
    except re.error:
        return
    problems = expect_problems("e", expect)
    if any("only blank text" in p for p in problems):
        assert not any(compiled.search(text) for text in EXPECT_SAMPLES if text.strip())


# --- every option by its type and name ---------------------------------------------------------------------

OPTIONS = {
    "model_checkpoint_revision": {"type": "str"},
    "model_checkpoint_hf_endpoint": {"type": "str"},
    "model_checkpoint_tool_find_links": {"type": "str"},
    "model_checkpoint_hf_token": {"type": "str", "no_log": True},
    "sglang_server_advertise_host": {"type": "str"},
    "sglang_server_port": {"type": "int"},
    "sglang_server_health_timeout": {"type": "int"},
    "sglang_router_workers": {"type": "list", "elements": "str"},
    "preflight_supported_os": {"type": "list", "elements": "str"},
    "sglang_validate_probes": {"type": "list", "elements": "dict"},
    "sglang_server_environment": {"type": "dict"},
    "sglang_settings": {"type": "dict"},
    "sglang_server_home": {"type": "path"},
}


def test_value_problems_judge_each_option_by_its_type_and_name() -> None:
    provided = {
        "model_checkpoint_revision": "abc\n",
        "model_checkpoint_hf_endpoint": "https://u:pw-not-shown@hub",
        "model_checkpoint_tool_find_links": "/srv/wheels",
        "model_checkpoint_hf_token": "a b",  # secret_problems' (never shown here)
        "sglang_server_advertise_host": "gpu-node-1:30000",
        "sglang_server_health_timeout": 0,
        "sglang_router_workers": ["http://gpu-node-1:30000", "gpu-node-2:30000"],
        "preflight_supported_os": ["debian12", "ubuntu\n2404"],
        "sglang_validate_probes": [PROBE | {"expect": "("}],
        "sglang_server_environment": {"A": "1\n"},
        "sglang_settings": {"host": "0.0.0.0"},  # settings_problems', with the replica
        "sglang_server_home": "/var/lib/sglang\n",
        "unrelated_url": "ftp://x",
    }
    problems = value_problems(OPTIONS, provided)
    named = [p.split(" ")[0].rstrip(":") for p in problems]
    assert named == [
        "model_checkpoint_revision",
        "model_checkpoint_hf_endpoint",
        "sglang_server_advertise_host",
        "sglang_server_health_timeout",
        "sglang_router_workers[1]",
        "preflight_supported_os[1]",
        "sglang_validate_probes[0].expect",
        "sglang_server_environment.A",
        "sglang_server_home",
    ], problems
    assert not any("pw-not-shown" in p for p in problems)


def test_the_project_s_own_values_pass() -> None:
    """Every role's defaults that are not templates, as the inventory might repeat them."""
    options: dict[str, Any] = {}
    provided: dict[str, Any] = {}
    for spec_file in sorted((ROOT / "roles").glob("*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(spec_file.read_text())["argument_specs"].values():
            for name, spec in (entry.get("options") or {}).items():
                options[name] = spec
                if "default" in spec and "{{" not in str(spec["default"]):
                    provided[name] = spec["default"]
    assert value_problems(options, provided) == []
    assert secret_problems(options, provided) == []
