"""The rollout's batches (module_utils/rollout_plan.py): sizes as counts or percentages, the canary, the
floor, the failure budget, resumed replicas first, the unchanged ones last."""

from __future__ import annotations

import base64
import json

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import replica_topology
from ansible_collections.glm5.deploy.plugins.module_utils.rollout_plan import (
    PlanError,
    amount,
    batch_index,
    budget_check,
    floor_check,
    plan,
    resume_choice,
    rollback_release,
    rolled_replicas,
)


def fleet(n: int, pending: set[int] | None = None, resume: set[int] | None = None) -> list[dict]:
    pending = set(range(n)) if pending is None else pending
    return [
        {"name": f"r{i}", "hosts": [f"n{i}"], "pending": i in pending, "resume": i in (resume or set())}
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("value", "total", "up", "expected"),
    [
        (4, 10, True, 4),
        ("4", 10, True, 4),
        ("10%", 256, True, 26),
        ("10%", 5, True, 1),
        ("0%", 5, True, 0),
        ("50%", 2, False, 1),
        ("50%", 1, False, 0),
        ("90%", 10, False, 9),
        (" 25 % ", 8, True, 2),
        ("100%", 7, True, 7),
    ],
)
def test_amounts_are_counts_or_percentages(value: object, total: int, up: bool, expected: int) -> None:
    assert amount(value, total, "x", round_up=up) == expected


@pytest.mark.parametrize("value", ["ten", "-1", "101%", True, "1.5", "%"])
def test_amounts_that_mean_nothing_are_refused_by_name(value: object) -> None:
    with pytest.raises(PlanError, match="sglang_rolling_canary"):
        plan(fleet(4), {"canary": value})


def test_ten_percent_batches_of_256_replicas() -> None:
    result = plan(fleet(256), {"batch_size": "10%"})
    assert [len(b["replicas"]) for b in result["batches"]] == [26] * 9 + [22]
    assert result["serial"] == [26] * 9 + [22]
    assert result["hosts"] == [f"n{i}" for i in range(256)]


def test_a_canary_then_the_ramp() -> None:
    result = plan(fleet(10), {"batch_size": 4, "canary": 1})
    assert [(b["kind"], b["replicas"]) for b in result["batches"]] == [
        ("canary", ["r0"]),
        ("batch", ["r1", "r2", "r3", "r4"]),
        ("batch", ["r5", "r6", "r7", "r8"]),
        ("batch", ["r9"]),
    ]
    assert "a canary of 1" in result["lines"][0]


def test_resumed_replicas_first_and_unchanged_ones_last_in_one_batch() -> None:
    result = plan(fleet(6, pending={1, 3, 5}, resume={4}), {"batch_size": 2})
    assert [(b["kind"], b["replicas"]) for b in result["batches"]] == [
        ("batch", ["r4", "r1"]),
        ("batch", ["r3", "r5"]),
        ("unchanged", ["r0", "r2"]),
    ]
    assert result["batch_of"] == {"n4": 0, "n1": 0, "n3": 1, "n5": 1, "n0": 2, "n2": 2}
    assert "1 resumed after an interruption" in result["lines"][0]


def test_a_fleet_with_nothing_to_change_is_one_batch_that_changes_nothing() -> None:
    result = plan(fleet(3, pending=set()), {"batch_size": 1, "canary": 1})
    assert [b["kind"] for b in result["batches"]] == ["unchanged"]
    assert result["serial"] == [3]


def test_a_plan_whose_batch_can_never_leave_is_refused() -> None:
    with pytest.raises(PlanError, match=r"a batch of 3 replica.* leave 7 .* under the floor of 8"):
        plan(fleet(10), {"batch_size": 3, "min_healthy": "80%"})
    assert plan(fleet(10), {"batch_size": 2, "min_healthy": "80%"})["settings"]["floor"] == 8


def test_the_floor_counts_the_whole_fleet_under_a_limit() -> None:
    # --limit two replicas of ten: the floor is half of the fleet, not of the two.
    assert plan(fleet(2), {"min_healthy": "50%"}, fleet=10)["settings"]["floor"] == 5


def test_multi_node_replicas_count_their_hosts_in_serial() -> None:
    replicas = [
        {"name": "a", "hosts": ["a1", "a2"], "pending": True},
        {"name": "b", "hosts": ["b1", "b2"], "pending": True},
        {"name": "c", "hosts": ["c1"], "pending": True},
    ]
    assert plan(replicas, {"batch_size": 2, "min_healthy": 0})["serial"] == [4, 1]


def test_the_floor_check_counts_only_routed_replicas_of_the_batch() -> None:
    healthy = ["http://a:1", "http://b:1/", "http://c:1"]
    assert floor_check(healthy, ["http://a:1"], 2)["ok"]
    refused = floor_check(healthy, ["http://a:1", "http://b:1"], 2, "batch 3")
    assert not refused["ok"] and refused["left"] == 1
    assert (
        refused["msg"].startswith("batch 3: 3 replica(s) healthy")
        and "under the floor of 2" in refused["msg"]
    )
    # A replica already out of the router (the guard took it out) costs the floor nothing when it leaves.
    assert floor_check(["http://b:1"], ["http://a:1"], 1)["ok"]


def test_the_failure_budget() -> None:
    assert budget_check([], 0)["ok"]
    assert budget_check(["r1"], 1)["ok"]
    over = budget_check(["r1", "r2", "r1"], 1)
    assert not over["ok"] and over["failed"] == ["r1", "r2"] and "the rollout stops here" in over["msg"]
    assert plan(fleet(20), {"failure_budget": "10%"})["settings"]["budget"] == 2


def test_the_batch_is_found_from_its_hosts() -> None:
    result = plan(fleet(4), {"batch_size": 2})
    assert batch_index(result["batch_of"], ["n2", "n3"]) == 1
    with pytest.raises(PlanError):
        batch_index(result["batch_of"], ["n1", "n2"])


def test_replicas_are_planned_whole_from_the_hosts_still_in_the_run() -> None:
    topology = replica_topology(["a1", "a2", "b1", "c1"], {"sglang_replica_a": ["a1", "a2"]})
    info = {h: {"pending": h != "c1", "settings": {"batch_size": 1}} for h in ["a1", "b1", "c1"]}
    chosen = rolled_replicas(topology, ["a1", "b1", "c1"], info)
    assert [r["name"] for r in chosen["replicas"]] == ["b1", "c1"]
    assert chosen["left_out"] == [
        {"replica": "a", "hosts": ["a2"], "why": "a node of the replica is no longer in the run"}
    ]
    assert chosen["fleet"] == 3 and chosen["values"] == {"batch_size": 1}


def test_settings_that_differ_between_hosts_are_refused() -> None:
    topology = replica_topology(["n1", "n2"], {})
    info = {"n1": {"settings": {"batch_size": 1}}, "n2": {"settings": {"batch_size": "50%"}}}
    with pytest.raises(PlanError, match=r"batch_size differs between hosts .n1: 1, n2: '50%'"):
        rolled_replicas(topology, ["n1", "n2"], info)


def test_the_rollout_simulation_keeps_the_floor_and_stops_at_the_budget() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "lab" / "bench" / "rollout_sim.py"
    spec = importlib.util.spec_from_file_location("rollout_sim", path)
    assert spec is not None and spec.loader is not None
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    ramp = sim.simulate(40, {"batch_size": "10%", "canary": 1, "min_healthy": "80%"}, "lab")
    assert (ramp["batches_run"], ramp["fewest_in_router"], ramp["floor"], ramp["stopped"]) == (11, 36, 32, "")
    stopped = sim.simulate(40, {"batch_size": 4, "failure_budget": 0}, "lab", failing=["r9"])
    assert (
        stopped["batches_run"] == 3
        and stopped["restored"] == ["r9"]
        and "failure budget 0" in stopped["stopped"]
    )
    going = sim.simulate(40, {"batch_size": 4, "failure_budget": 1}, "lab", failing=["r9"])
    assert going["batches_run"] == 10 and going["stopped"] == ""


# --- One node's choice while staging (resume_choice, rollback_release)


def _marker(record: dict) -> str:
    return base64.b64encode(json.dumps(record).encode()).decode()


INTERRUPTED_UPDATE = {
    "kind": "update",
    "release_from": "0.5.9-aaa",
    "release_to": "0.5.23-bbb",
    "pid_before": 7,
}
INTERRUPTED_ROLLBACK = {"kind": "rollback", "release_from": "0.5.23-bbb", "release_to": "0.5.9-aaa"}


def test_a_node_without_a_record_starts_from_its_running_release() -> None:
    assert resume_choice("", "/opt/sglang/releases/0.5.23-bbb") == {
        "resume": {},
        "previous_release": "0.5.23-bbb",
        "touched": False,
    }
    assert resume_choice("", "")["previous_release"] == ""  # a node with no release yet


def test_a_record_is_resumed_and_restores_the_release_the_switch_left() -> None:
    choice = resume_choice(_marker(INTERRUPTED_UPDATE), "/opt/sglang/releases/0.5.23-bbb")
    assert choice == {"resume": INTERRUPTED_UPDATE, "previous_release": "0.5.9-aaa", "touched": True}


def test_an_unreadable_record_is_refused_not_guessed() -> None:
    with pytest.raises(PlanError, match="cannot be read"):
        resume_choice(base64.b64encode(b"{not json").decode(), "/opt/sglang/releases/x")
    with pytest.raises(PlanError, match="not a mapping"):
        resume_choice(_marker([1, 2]), "/opt/sglang/releases/x")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("named", "resume", "previous_link", "release"),
    [
        ("0.5.8-ccc", INTERRUPTED_UPDATE, "/opt/sglang/releases/0.5.9-aaa", "0.5.8-ccc"),  # named wins
        ("", INTERRUPTED_ROLLBACK, "/opt/sglang/releases/0.5.23-bbb", "0.5.9-aaa"),  # the rollback's target
        ("", INTERRUPTED_UPDATE, "/opt/sglang/releases/0.5.23-bbb", "0.5.9-aaa"),  # where the update began
        ("", {}, "/opt/sglang/releases/0.5.9-aaa", "0.5.9-aaa"),  # the previous link
        ("", {}, "", ""),  # nothing to go back to: the role refuses
    ],
)
def test_the_release_a_rollback_goes_back_to(named, resume, previous_link, release) -> None:
    assert rollback_release(named, resume, previous_link) == release
