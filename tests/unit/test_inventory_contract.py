"""The inventory contract (module_utils/inventory_contract.py): the groups a run needs, which host may hold
which role, two names for one machine, and the addresses other hosts connect to. Each problem names the group,
host or variable to change; the lab's inventory and the example production inventory keep the contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_network import (
    bind_problems,
    is_loopback,
    is_wildcard,
    parse_address,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inventory_contract import (
    CONTRACT_VARS,
    canonical_host,
    group_problems,
    group_summary,
    inventory_problems,
    machine_key,
    machine_problems,
    reach_problems,
)
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
FLEET = {
    "all": ["gpu-node-1", "gpu-node-2", "lab-gateway"],
    "ungrouped": [],
    "sglang_nodes": ["gpu-node-1", "gpu-node-2"],
    "sglang_router": ["lab-gateway"],
}


def fleet(**groups: list[str]) -> dict[str, list[str]]:
    """FLEET with ``groups`` laid over it (an empty list: the group is there without hosts)."""
    out = {**FLEET, **groups}
    out["all"] = list(dict.fromkeys(h for name, hosts in out.items() if name != "all" for h in hosts))
    return out


# --- groups ------------------------------------------------------------------------------------------------


def test_the_issue_s_inventory_is_refused_naming_what_it_needs_and_what_it_has() -> None:
    """Issue 41: groups gpu_nodes and routers ran every play on "no hosts matched" and ended green."""
    groups = {
        "all": [*(f"gpu{i:02}" for i in range(8)), "gw01"],
        "ungrouped": [],
        "gpu_nodes": [f"gpu{i:02}" for i in range(8)],
        "routers": ["gw01"],
    }
    (problem,) = group_problems(groups, need_router=True)
    assert problem == (
        "inventory: groups sglang_nodes and sglang_router are missing or empty; the run needs sglang_nodes "
        "(the GPU nodes) and sglang_router (the router host). This inventory has groups: gpu_nodes "
        "(8 hosts), routers (1 host). See README 'Production inventory'."
    )


@pytest.mark.parametrize("nodes", [None, []])
def test_no_serving_nodes_is_refused_whatever_the_run(nodes: list[str] | None) -> None:
    groups = fleet()
    if nodes is None:
        del groups["sglang_nodes"]
    else:
        groups["sglang_nodes"] = nodes
    (problem,) = group_problems(groups)
    assert problem.startswith("inventory: group sglang_nodes is missing or empty; the run needs sglang_nodes")
    assert "sglang_router (1 host)" in problem and "sglang_router (the router host)" not in problem


def test_the_router_host_is_needed_only_where_the_run_routes() -> None:
    groups = fleet(sglang_router=[])
    assert group_problems(groups) == []  # preflight, provision, serve, validate alone: a fleet without one
    (problem,) = group_problems(groups, need_router=True)
    assert problem.startswith(
        "inventory: group sglang_router is missing or empty; the run needs sglang_nodes"
    )


def test_one_router_host_at_most() -> None:
    (problem,) = group_problems(fleet(sglang_router=["gw1", "gw2"]))
    assert problem.startswith("inventory: group sglang_router has 2 hosts (gw1, gw2); it holds one")
    assert "fleet lock" in problem and "Keep one host in sglang_router" in problem


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("SGLANG_NODES", "sglang_nodes"),
        ("Sglang_Router", "sglang_router"),
        ("sglang-router", "sglang_router"),
        ("Prometheus", "prometheus"),
        ("sglang-replica-pair", "sglang_replica_pair"),
        ("SGLANG_REPLICA_pair", "sglang_replica_pair"),
    ],
)
def test_a_group_that_misspells_the_contract_s_by_case_or_punctuation_is_refused(
    name: str, meant: str
) -> None:
    problems = group_problems({**FLEET, name: ["gpu-node-1"]})
    assert f"inventory: group {name} is not {meant}: Ansible's group names are exact" in problems[0]
    assert f"Rename it {meant}" in problems[0]


def test_a_near_name_is_offered_when_the_group_is_missing() -> None:
    groups = {"all": ["a"], "ungrouped": [], "sglang_node": ["a"], "sglang_router": ["r"]}
    (problem,) = group_problems(groups)
    assert "Close to it: sglang_node (did you mean sglang_nodes?)." in problem


def test_replica_groups() -> None:
    assert group_problems(fleet(sglang_replica_pair=["gpu-node-1", "gpu-node-2"])) == []
    (empty,) = group_problems(fleet(sglang_replica_pair=[]))
    assert "sglang_replica_pair have no hosts" in empty
    (stranger,) = group_problems(fleet(sglang_replica_pair=["gpu-node-2", "lab-gateway"]))
    assert stranger.startswith("inventory: group sglang_replica_pair has lab-gateway, not in sglang_nodes")
    (twice,) = group_problems(
        fleet(sglang_replica_a=["gpu-node-1", "gpu-node-2"], sglang_replica_b=["gpu-node-2"])
    )
    assert twice.startswith(
        "inventory: gpu-node-2 is in two replica groups, sglang_replica_a and sglang_replica_b"
    )
    unnamed = group_problems(fleet(sglang_replica_=["gpu-node-1"]))
    assert unnamed[0].startswith("inventory: group sglang_replica_ names no replica")


def test_a_gpu_node_may_be_the_router_host_and_a_prometheus_host_anything() -> None:
    groups = fleet(sglang_router=["gpu-node-1"], prometheus=["gpu-node-2", "monitor"])
    assert group_problems(groups, need_router=True) == []


def test_the_summary_of_groups() -> None:
    assert (
        group_summary({"all": ["a", "b"], "ungrouped": ["b"], "x": ["a"]}) == "ungrouped (1 host), x (1 host)"
    )
    assert group_summary({"all": [], "ungrouped": []}) == "none (no host in any group)"


GROUP_NAMES = st.sampled_from(
    ["sglang_nodes", "sglang_router", "prometheus", "gpu_nodes", "SGLANG_NODES", "sglang_replica_a", "x-y"]
)
HOSTS = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4, unique=True)


@given(st.dictionaries(GROUP_NAMES, HOSTS, max_size=6), st.booleans())
def test_group_problems_never_raise_and_always_name_the_inventory(groups: dict, need_router: bool) -> None:
    """Any inventory: a list of sentences, each about the inventory; sglang_nodes without hosts is refused."""
    problems = group_problems(groups, need_router=need_router)
    assert all(isinstance(p, str) and p.startswith("inventory: ") for p in problems)
    if not groups.get("sglang_nodes"):
        assert any("sglang_nodes" in p and "missing or empty" in p for p in problems)


# --- two names, one machine ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"ansible_host": "10.0.0.5"}, {"ansible_host": "10.0.0.5"}),
        (
            {"ansible_host": "10.0.0.5", "ansible_port": 22},
            {"ansible_host": "10.0.0.5", "ansible_port": "22"},
        ),
        ({"ansible_host": "10.0.0.5"}, {"ansible_host": "::ffff:10.0.0.5"}),
        ({"ansible_host": "fd00::5"}, {"ansible_host": "[FD00:0:0::5]"}),
        ({"ansible_host": "GPU01.example.internal."}, {"ansible_host": "gpu01.example.internal"}),
        (
            {"ansible_host": "gpu01", "ansible_connection": "ssh"},
            {"ansible_host": "gpu01", "ansible_connection": "paramiko"},
        ),
        (
            {"ansible_ssh_host": "10.0.0.5", "ansible_ssh_port": 2222},
            {"ansible_host": "10.0.0.5", "ansible_port": 2222},
        ),
    ],
)
def test_two_names_that_reach_one_machine_are_refused(first: dict, second: dict) -> None:
    (problem,) = machine_problems({"gpu01": first, "gpu01-alias": second})
    assert problem.startswith("inventory: gpu01 and gpu01-alias reach one machine (")
    assert "list a machine once, under one name" in problem


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (
            {"ansible_host": "127.0.0.1", "ansible_port": 2222},
            {"ansible_host": "127.0.0.1", "ansible_port": 2200},
        ),
        ({"ansible_host": "10.0.0.5"}, {"ansible_host": "10.0.0.6"}),
        # A port that is not ASCII digits stays text (str.isdigit() accepts "¹", which int() refuses).
        (
            {"ansible_host": "10.0.0.5", "ansible_port": "¹"},
            {"ansible_host": "10.0.0.5", "ansible_port": "1"},
        ),
        ({"ansible_connection": "local"}, {"ansible_connection": "ansible.builtin.local"}),
        # The lab: ssh carried by podman exec into the container named by ansible_host.
        ({"ansible_host": "glm5-lab-gpu-node-1"}, {"ansible_host": "glm5-lab-gpu-node-2"}),
        ({"ansible_connection": "containers.podman.podman", "ansible_host": "c1"}, {"ansible_host": "c1"}),
    ],
)
def test_distinct_machines_pass(first: dict, second: dict) -> None:
    assert machine_problems({"one": first, "two": second}) == []


def test_a_machine_s_key() -> None:
    assert machine_key("gpu01", {}) == ("ssh", "gpu01", 22)
    assert machine_key("x", {"ansible_connection": "local"}) is None
    assert machine_key("x", {"ansible_connection": "community.docker.docker", "ansible_host": "C1"}) == (
        "community.docker.docker",
        "c1",
        None,
    )
    assert canonical_host("[::FFFF:127.0.0.1]") == "127.0.0.1"


# --- addresses ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.1",
        "0x7f.1",
        "2130706433",
        "::1",
        "[::1]",
        "0:0:0:0:0:0:0:1",
        "::ffff:127.0.0.1",
        "localhost",
        "LOCALHOST.",
        "localhost.localdomain",
        "ip6-localhost",
        "api.localhost",
    ],
)
def test_loopback_in_every_spelling(host: str) -> None:
    assert is_loopback(host)
    assert not is_wildcard(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "0", "::", "[::]", "0:0:0:0:0:0:0:0", "::ffff:0.0.0.0", "*"])
def test_wildcards_in_every_spelling(host: str) -> None:
    assert is_wildcard(host)
    assert not is_loopback(host)


@pytest.mark.parametrize(
    "host", ["10.0.0.5", "gpu-node-1", "fe80::1", "localhost-gw", "mylocalhost", "1.2.3.4"]
)
def test_other_hosts_are_neither(host: str) -> None:
    assert not is_loopback(host) and not is_wildcard(host)


def test_parse_address() -> None:
    assert str(parse_address("127.1")) == "127.0.0.1"
    assert str(parse_address("::ffff:10.0.0.1")) == "10.0.0.1"
    assert parse_address("gpu-node-1") is None and parse_address("") is None and parse_address(None) is None


def test_a_bind_on_loopback_in_any_spelling_needs_no_key() -> None:
    for host in ("127.1", "LOCALHOST.", "::ffff:127.0.0.1"):
        assert bind_problems(host, "", host_var="h", key_var="k") == []


def test_the_lab_s_addresses_pass() -> None:
    hosts = {
        "gpu-node-1": {"ansible_host": "glm5-lab-gpu-node-1", "sglang_server_advertise_host": "gpu-node-1"},
        "gpu-node-2": {"ansible_host": "glm5-lab-gpu-node-2", "sglang_server_advertise_host": "gpu-node-2"},
        "lab-gateway": {"ansible_host": "glm5-lab-lab-gateway"},
    }
    groups = fleet(prometheus=["lab-gateway"], sglang_replica_pair=["gpu-node-1", "gpu-node-2"])
    assert inventory_problems(groups, hosts, need_router=True) == []


@pytest.mark.parametrize(
    ("node", "words"),
    [
        (
            {"ansible_host": "127.0.0.1", "ansible_port": 2222},
            "gpu-node-1's address is '127.0.0.1' (ansible_host",
        ),
        (
            {"sglang_server_advertise_host": "0.0.0.0"},
            "(sglang_server_advertise_host of gpu-node-1), a wildcard",
        ),
        ({"sglang_server_advertise_host": "LocalHost."}, "a loopback address"),
        ({"sglang_server_advertise_host": "::"}, "a wildcard address"),
        ({"sglang_server_advertise_host": ""}, "sglang_server_advertise_host of gpu-node-1 is empty"),
        ({"sglang_server_advertise_host": "  "}, "sglang_server_advertise_host of gpu-node-1 is empty"),
        ({"sglang_server_advertise_host": " 127.0.0.1 "}, "gpu-node-1's address is '127.0.0.1'"),
        ({"sglang_server_host": "127.0.0.1"}, "sglang_server_host of gpu-node-1 is '127.0.0.1'"),
    ],
)
def test_a_node_the_router_cannot_reach_is_refused(node: dict, words: str) -> None:
    problems = reach_problems(FLEET, {"gpu-node-1": node})
    assert len(problems) == 1 and words in problems[0], problems
    assert "the router (lab-gateway)" in problems[0]


def test_rank_0_is_the_dist_init_address_of_the_other_ranks() -> None:
    groups = fleet(sglang_router=[], sglang_replica_pair=["gpu-node-1", "gpu-node-2"])
    (problem,) = reach_problems(groups, {"gpu-node-1": {"sglang_server_advertise_host": "127.0.0.1"}})
    assert "gpu-node-1's address (also its replica's dist-init address) is '127.0.0.1'" in problem
    assert "the other ranks of its replica (gpu-node-2)" in problem
    # Only rank 0 is connected to by its peers; rank 1 has no router or Prometheus here.
    assert reach_problems(groups, {"gpu-node-2": {"sglang_server_advertise_host": "127.0.0.1"}}) == []


def test_loopback_is_fine_where_nobody_else_connects() -> None:
    """A node alone (no router, no Prometheus, a replica of its own), or a router that is its own node."""
    alone = {"all": ["n"], "sglang_nodes": ["n"]}
    assert (
        reach_problems(alone, {"n": {"ansible_host": "127.0.0.1", "sglang_server_host": "127.0.0.1"}}) == []
    )
    one_box = {"all": ["n"], "sglang_nodes": ["n"], "sglang_router": ["n"], "prometheus": ["n"]}
    assert reach_problems(one_box, {"n": {"ansible_host": "localhost"}}) == []


def test_prometheus_reaches_every_node_and_the_router_s_metrics() -> None:
    groups = fleet(prometheus=["monitor"])
    hosts = {
        "gpu-node-2": {"sglang_server_advertise_host": "127.0.0.1"},
        "lab-gateway": {
            "ansible_host": "127.0.0.1",
            "ansible_port": 2201,
            "sglang_router_metrics_host": "::1",
        },
    }
    problems = reach_problems(groups, hosts)
    assert any(
        p.startswith("inventory: gpu-node-2's address is '127.0.0.1'") and "Prometheus (monitor)" in p
        for p in problems
    ), problems
    assert any(
        "scrapes the router's and the guard's metrics at '127.0.0.1' (ansible_host of lab-gateway)" in p
        for p in problems
    ), problems
    assert any(
        "sglang_router_metrics_host of lab-gateway is '::1', so the router's and the guard's metrics" in p
        for p in problems
    ), problems
    # The nodes' firewall lets the router in by the same address: nothing from another machine.
    assert any(
        p.startswith("inventory: the nodes' firewall lets lab-gateway in at '127.0.0.1'") for p in problems
    )


def test_the_guard_s_metrics_listener_of_its_own() -> None:
    groups = fleet(prometheus=["monitor"])
    (problem,) = reach_problems(groups, {"lab-gateway": {"sglang_guard_metrics_host": "127.0.0.1"}})
    assert problem.startswith(
        "inventory: sglang_guard_metrics_host of lab-gateway is '127.0.0.1', so the guard's"
    )
    # On the Prometheus host itself, loopback is reachable.
    assert (
        reach_problems(
            fleet(prometheus=["lab-gateway"]), {"lab-gateway": {"sglang_guard_metrics_host": "127.0.0.1"}}
        )
        == []
    )


def test_a_firewall_the_operator_lists_the_sources_of_is_theirs() -> None:
    hosts = {"lab-gateway": {"ansible_host": "127.0.0.1", "ansible_port": 2201}}
    for node_vars in (
        {"node_firewall_enabled": False},
        {"node_firewall_enabled": "no"},
        {"node_firewall_api_sources": ["10.0.0.9"]},
    ):
        both = {"gpu-node-1": node_vars, "gpu-node-2": node_vars, **hosts}
        assert reach_problems(FLEET, both) == []


def test_the_groups_come_first() -> None:
    """An inventory without its groups is refused for them alone: the rest reads the groups."""
    hosts = {"a": {"ansible_host": "10.0.0.1"}, "b": {"ansible_host": "10.0.0.1"}}
    (problem,) = inventory_problems({"all": ["a", "b"], "x": ["a", "b"]}, hosts)
    assert "sglang_nodes is missing or empty" in problem


def test_the_contract_s_variables_are_the_roles() -> None:
    """Each variable the contract reads (besides Ansible's own) is one a role's argument spec declares."""
    declared: set[str] = set()
    for spec_file in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec_file.read_text())["argument_specs"].values():
            declared |= set(entry.get("options") or {})
    assert {v for v in CONTRACT_VARS if not v.startswith("ansible_")} <= declared


def _inventory_groups(path: Path) -> tuple[dict[str, list[str]], dict[str, dict[str, Any]]]:
    """groups and host variables of a YAML inventory, as Ansible reads them (children, hosts, all)."""
    groups: dict[str, list[str]] = {"all": [], "ungrouped": []}
    hosts: dict[str, dict[str, Any]] = {}

    def walk(name: str, node: dict[str, Any] | None) -> list[str]:
        node = node or {}
        members = []
        for host, host_vars in (node.get("hosts") or {}).items():
            hosts.setdefault(host, {}).update(host_vars or {})
            members.append(host)
        for child, child_node in (node.get("children") or {}).items():
            members += walk(child, child_node)
        groups[name] = list(dict.fromkeys(groups.get(name, []) + members))
        return members

    doc = yaml.safe_load(path.read_text())
    walk("all", doc["all"])
    return groups, hosts


@pytest.mark.parametrize(
    "path",
    ["inventory/lab/hosts.yml", "inventory/production.example/hosts.yml", "tests/fixtures/inputs/hosts.yml"],
)
def test_the_project_s_inventories_keep_the_contract(path: str) -> None:
    groups, hosts = _inventory_groups(ROOT / path)
    assert inventory_problems(groups, hosts, need_router=True) == []


def test_the_filter_reads_the_contract_s_variables_and_leaves_out_an_undefined_one() -> None:
    import jinja2
    from ansible_collections.glm5.deploy.plugins.filter.inputs import FilterModule

    check = FilterModule().filters()["sglang_inventory_problems"]
    hostvars = {
        "gpu-node-1": {"sglang_server_advertise_host": jinja2.Undefined(name="nothing"), "unrelated": 1},
        "gpu-node-2": {"sglang_server_advertise_host": "127.0.0.1"},
        "lab-gateway": {"ansible_host": "10.0.0.9"},
    }
    (problem,) = check(FLEET, hostvars)
    assert problem.startswith("inventory: gpu-node-2's address is '127.0.0.1'")
    (groups,) = check({"all": ["x"], "gpu_nodes": ["x"]}, {"x": {}}, "yes")
    assert "sglang_nodes and sglang_router are missing or empty" in groups


ADDRESSES = st.one_of(
    st.ip_addresses().map(str),
    st.sampled_from(["localhost", "LOCALHOST.", "0", "127.1", "[::1]", "*", "", " ", "gpu-node-1", "0x7f.1"]),
    st.text(max_size=10),
)
HOST_VARS = st.fixed_dictionaries(
    {},
    optional={
        "ansible_host": ADDRESSES,
        "ansible_port": st.one_of(st.integers(0, 70000), st.text(max_size=5)),
        "ansible_connection": st.sampled_from(["ssh", "local", "paramiko", "community.docker.docker"]),
        "sglang_server_advertise_host": ADDRESSES,
        "sglang_server_host": ADDRESSES,
        "sglang_router_metrics_host": ADDRESSES,
        "sglang_guard_metrics_host": ADDRESSES,
        "node_firewall_enabled": st.one_of(st.booleans(), st.sampled_from(["no", "yes", "maybe"])),
    },
)


@given(st.dictionaries(st.sampled_from(["gpu-node-1", "gpu-node-2", "lab-gateway"]), HOST_VARS))
def test_any_host_variables_give_sentences_about_the_inventory(hosts: dict[str, dict[str, Any]]) -> None:
    """Whatever the inventory gives (addresses in any spelling, ports as strings, garbage), the contract
    answers in sentences and never raises."""
    groups = fleet(prometheus=["lab-gateway"], sglang_replica_pair=["gpu-node-1", "gpu-node-2"])
    problems = inventory_problems(groups, hosts, need_router=True)
    assert all(isinstance(p, str) and p.startswith("inventory: ") for p in problems)


def test_loopback_reaches_another_inventory_name_on_the_same_machine() -> None:
    """A fleet on one machine (local connections, each server on its own port, as the controller-side tests
    run validate.yml): the router reaches the nodes on loopback. Over ssh to another machine, it does not."""
    local = {"ansible_connection": "local", "sglang_server_advertise_host": "127.0.0.1"}
    hosts = {"gpu-node-1": local, "gpu-node-2": local, "lab-gateway": {"ansible_connection": "local"}}
    assert inventory_problems(fleet(prometheus=["lab-gateway"]), hosts) == []
    hosts["lab-gateway"] = {"ansible_host": "10.0.0.9"}
    problems = reach_problems(FLEET, hosts)
    assert len(problems) == 2 and all("a loopback address" in p for p in problems), problems
