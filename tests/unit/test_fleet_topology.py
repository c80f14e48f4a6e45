"""Replicas, ranks, rolling batches and the router's worker plan, from the inventory."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import (
    ROLE_DEFAULTS,
    TopologyError,
    find_worker,
    healthy_workers,
    place_settings,
    registration_plan,
    replica_place,
    replica_topology,
    rolling_batches,
    worker_url,
)

NODES = ["n1", "n2", "n3", "n4"]


def test_every_node_is_its_own_replica_without_replica_groups() -> None:
    topo = replica_topology(["a", "b"], {"sglang_nodes": ["a", "b"], "all": ["a", "b"]})
    assert [r["hosts"] for r in topo["replicas"]] == [["a"], ["b"]]
    assert topo["hosts"]["b"] == {"replica": "b", "rank": 0, "nnodes": 1, "leader": "b"}


def test_a_replica_group_ranks_its_hosts_in_inventory_order() -> None:
    topo = replica_topology(NODES, {"sglang_replica_tp16": ["n3", "n2"], "other": ["n1"]})
    assert [(r["name"], r["hosts"]) for r in topo["replicas"]] == [
        ("n1", ["n1"]),
        ("tp16", ["n3", "n2"]),
        ("n4", ["n4"]),
    ]
    assert topo["hosts"]["n3"] == {"replica": "tp16", "rank": 0, "nnodes": 2, "leader": "n3"}
    assert topo["hosts"]["n2"]["rank"] == 1


def test_a_node_in_two_replicas_is_refused() -> None:
    with pytest.raises(TopologyError, match="n2 is in two replica groups"):
        replica_topology(NODES, {"sglang_replica_a": ["n1", "n2"], "sglang_replica_b": ["n2", "n3"]})


def test_a_replica_member_outside_the_serving_nodes_is_refused() -> None:
    with pytest.raises(TopologyError, match=r"host\(s\) gw outside the serving nodes"):
        replica_topology(NODES, {"sglang_replica_a": ["n1", "gw"]})


def test_an_empty_replica_group_is_ignored() -> None:
    assert len(replica_topology(NODES, {"sglang_replica_none": []})["replicas"]) == 4


def groups_of(host: str, groups: dict[str, list[str]]) -> list[str]:
    return [g for g, members in groups.items() if host in members]


@pytest.mark.parametrize(
    "replica_groups",
    [
        {},
        {"sglang_replica_tp16": ["n3", "n2"]},
        {"sglang_replica_a": ["n1", "n2"], "sglang_replica_b": ["n4", "n3"]},
    ],
)
def test_a_nodes_place_from_its_own_groups_is_its_place_in_the_topology(replica_groups: dict) -> None:
    groups = {"all": NODES, "sglang_nodes": NODES, "other": ["n1"], **replica_groups}
    topo = replica_topology(NODES, groups)
    for host in NODES:
        where = replica_place(host, groups_of(host, groups), groups)
        replica = next(r for r in topo["replicas"] if host in r["hosts"])
        assert where == {**topo["hosts"][host], "hosts": replica["hosts"]}, host


def test_a_nodes_place_reads_no_group_but_its_replicas() -> None:
    class OnlyItsReplica(dict):
        def __getitem__(self, key: str) -> list[str]:
            assert key == "sglang_replica_a", f"read group {key}"
            return ["n1", "n2"]

    assert replica_place("n2", ["sglang_nodes", "sglang_replica_a"], OnlyItsReplica())["rank"] == 1
    assert replica_place("gw", ["sglang_router"], OnlyItsReplica())["hosts"] == ["gw"]


def test_a_node_in_two_replica_groups_has_no_place() -> None:
    with pytest.raises(TopologyError, match="n2 is in two replica groups"):
        replica_place("n2", ["sglang_replica_b", "sglang_replica_a"], {})


TP16 = {"sglang_replica_tp16": ["n1", "n2"]}


def place(host: str, groups: dict[str, list[str]] = TP16) -> dict:
    return replica_place(host, groups_of(host, groups), groups)


def test_place_settings_render_ranks_and_the_leaders_address() -> None:
    assert place_settings(place("n1"), "10.0.0.1", 20000) == {
        "nnodes": 2,
        "node_rank": 0,
        "dist_init_addr": "10.0.0.1:20000",
    }
    assert place_settings(place("n2"), "10.0.0.1", 20000)["node_rank"] == 1
    assert place_settings(place("n3"), "10.0.0.3", 20000) == {}
    assert place_settings(place("n2"), "fd00::1", 20000)["dist_init_addr"] == "[fd00::1]:20000"


@pytest.mark.parametrize("port", [0, 70000])
def test_place_settings_refuse_a_bad_port(port: int) -> None:
    with pytest.raises(TopologyError, match="not a TCP port"):
        place_settings(place("n1"), "10.0.0.1", port)


def test_a_node_missing_from_its_own_replica_group_has_no_place() -> None:
    with pytest.raises(
        TopologyError, match="gw is not among the hosts of its replica group sglang_replica_a"
    ):
        replica_place("gw", ["sglang_replica_a"], {"sglang_replica_a": ["n1", "n2"]})


def test_rolling_batches_are_whole_replicas() -> None:
    topo = replica_topology(NODES, {"sglang_replica_tp16": ["n2", "n3"]})
    plan = rolling_batches(topo, ["n4", "n3", "n2", "n1"])
    assert plan["hosts"] == ["n1", "n2", "n3", "n4"]
    assert plan["serial"] == [1, 2, 1]
    assert rolling_batches(topo, NODES, 2)["serial"] == [3, 1]


def test_rolling_batches_refuse_a_limit_that_splits_a_replica() -> None:
    topo = replica_topology(NODES, {"sglang_replica_tp16": ["n2", "n3"]})
    with pytest.raises(TopologyError, match=r"replica tp16 only in part \(without n3"):
        rolling_batches(topo, ["n1", "n2"])


def test_rolling_batches_follow_the_limit_and_refuse_strangers() -> None:
    topo = replica_topology(NODES, {})
    assert rolling_batches(topo, ["n3"])["serial"] == [1]
    with pytest.raises(TopologyError, match="gw not in sglang_nodes"):
        rolling_batches(topo, ["n3", "gw"])
    with pytest.raises(TopologyError, match="1 or more"):
        rolling_batches(topo, ["n3"], 0)


LISTING = {
    "workers": [
        {"id": "u1", "url": "http://n1:30000", "is_healthy": True, "status": "ready", "load": 0},
        {"id": "u2", "url": "http://old:30000/", "is_healthy": False, "status": "not_ready", "load": 0},
        {"id": "u3", "url": "http://n3:30000", "is_healthy": True, "status": "draining", "load": 2},
    ],
    "total": 3,
}


def test_registration_adds_only_what_is_missing_and_prunes_on_request() -> None:
    wanted = ["http://n1:30000", "http://n2:30000", "http://n3:30000"]
    plan = registration_plan(LISTING, wanted, prune=True)
    assert plan == {
        "add": ["http://n2:30000"],
        "remove": [{"id": "u2", "url": "http://old:30000"}],
        "changed": True,
    }
    assert registration_plan(LISTING, wanted, prune=False)["remove"] == []


def test_registration_of_what_is_there_changes_nothing() -> None:
    plan = registration_plan(LISTING, ["http://n1:30000/", "http://old:30000", "http://n3:30000"], prune=True)
    assert plan == {"add": [], "remove": [], "changed": False}
    assert registration_plan({"workers": []}, [], prune=True)["changed"] is False


def test_workers_are_found_by_url_and_only_ready_healthy_ones_count() -> None:
    assert find_worker(LISTING, "http://old:30000")["id"] == "u2"
    assert find_worker(LISTING, "http://nope:1") is None
    assert healthy_workers(LISTING) == ["http://n1:30000"]
    assert worker_url("gpu-node-1", "30000") == "http://gpu-node-1:30000"
    assert worker_url("fd00::2", 1, "https") == "https://[fd00::2]:1"


def test_in_flight_counts_running_and_waiting_over_dp_ranks() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import in_flight_requests

    answer = {"loads": [{"dp_rank": 0, "num_running_reqs": 2, "num_waiting_reqs": 1}, {"dp_rank": 1}]}
    assert in_flight_requests(answer) == 3
    assert in_flight_requests({"loads": []}) == 0


def test_the_router_is_reached_over_tls_by_its_certificates_name_else_on_loopback() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import (
        ROUTER_CA_FILE,
        router_endpoint,
    )

    plain = router_endpoint({}, "gw")
    assert plain == {"url": "http://127.0.0.1:30000", "ca_path": "", "ca_file": ROUTER_CA_FILE}
    tls = {"sglang_router_tls_certificate": "PEM", "ansible_host": "gw.example", "sglang_router_port": 8443}
    assert router_endpoint(tls, "gw")["url"] == "https://gw.example:8443"
    named = tls | {"sglang_router_tls_name": "api.example", "sglang_router_ca_bundle": "PEM"}
    assert router_endpoint(named, "gw") | {"ca_file": ""} == {
        "url": "https://api.example:8443",
        "ca_path": ROUTER_CA_FILE,
        "ca_file": "",
    }


def test_the_topology_filter_works_it_out_once_per_inventory() -> None:
    from ansible_collections.glm5.deploy.plugins.filter.topology import sglang_topology

    groups = {
        "all": ["n1", "n2", "n3", "gw"],
        "sglang_nodes": ["n1", "n2", "n3"],
        "sglang_replica_a": ["n2", "n3"],
    }
    first = sglang_topology(groups)
    assert [r["hosts"] for r in first["replicas"]] == [["n1"], ["n2", "n3"]]
    assert sglang_topology({**groups, "sglang_router": ["gw"]}) is first  # other groups do not matter
    assert sglang_topology({**groups, "sglang_replica_a": ["n3", "n2"]})["hosts"]["n3"]["rank"] == 0


def test_the_python_side_states_the_roles_defaults_as_the_roles_do() -> None:
    """ROLE_DEFAULTS (what the controller's filters assume for a host whose inventory sets nothing) equals
    roles/glm5_defaults' defaults/main.yml, the values' one home (and any other role's that would set one,
    which test_glm5_defaults refuses): one value, not two that drift apart."""
    import yaml

    roles = Path(__file__).resolve().parents[2] / "roles"
    seen: dict[str, list[str]] = {}
    for defaults in sorted(roles.glob("*/defaults/main.yml")):
        values = yaml.safe_load(defaults.read_text()) or {}
        for name, value in ROLE_DEFAULTS.items():
            if name in values:
                assert values[name] == value, (defaults, name, values[name], value)
                seen.setdefault(name, []).append(defaults.parts[-3])
    assert set(seen) == set(ROLE_DEFAULTS), seen
