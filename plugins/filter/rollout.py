"""Filters for the batches of a rolling update or rollback (module_utils/rollout_plan.py), on the controller.

{{ hosts | glm5_rollout_plan(hostvars, groups) }}       -> the batches, after every host staged the update
{{ plan | glm5_rollout_batch(ansible_play_batch) }}     -> the batch the roll play runs now
{{ workers_answer | glm5_rollout_floor(urls, floor) }}  -> may this batch leave the router?
{{ restored | glm5_rollout_budget(budget) }}             -> may the rollout go on after these failures?
{{ hosts | glm5_left_out(hostvars, budget, stopped) }}   -> leave the failed nodes out, or stop everything?
{{ hosts | glm5_replica_urls(hostvars, groups) }}        -> the router URLs of these hosts' replicas (rank 0)
{{ marker | glm5_rollout_resume(current_link) }}         -> {resume, previous_release, touched} while staging
{{ named | glm5_rollback_release(resume, previous_link) }} -> the release a rollback goes back to
{{ hosts | glm5_hosts_flagged(hostvars, var) }}           -> the hosts whose ``var`` is set and true
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import (
    TopologyError,
    healthy_workers,
    replica_topology,
    replica_url,
)
from ansible_collections.glm5.deploy.plugins.module_utils.rollout_plan import (
    PlanError,
    batch_index,
    budget_check,
    floor_check,
    left_out_check,
    plan,
    resume_choice,
    rollback_release,
    rolled_replicas,
)

# Each host's plan input (roles/sglang_rollout/tasks/plan_input.yml): {pending, resume, settings}.
PLAN_INPUT = "sglang_rollout_plan_input"


def _guard(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except (PlanError, TopologyError) as exc:
        raise AnsibleFilterError(str(exc)) from exc


def glm5_rollout_plan(
    hosts: Sequence[str], hostvars: Any, groups: Mapping[str, Sequence[str]]
) -> dict[str, Any]:
    """The batches for ``hosts`` (still in the run, in replica order), from each host's plan input."""
    plain = {str(k): [str(h) for h in v] for k, v in groups.items()}
    topology = _guard(replica_topology, plain.get("sglang_nodes", []), plain)
    names = [str(h) for h in hosts]
    info = {h: dict(hostvars[h].get(PLAN_INPUT) or {}) for h in names}
    chosen = _guard(rolled_replicas, topology, names, info)
    result = _guard(plan, chosen["replicas"], chosen["values"], chosen["fleet"])
    result["left_out"] = chosen["left_out"]
    result["lines"] += [
        f"left out: replica {o['replica']} ({', '.join(o['hosts'])}: {o['why']})" for o in chosen["left_out"]
    ]
    leaders = {r["name"]: r["leader"] for r in chosen["replicas"]}
    for batch in result["batches"]:
        batch["urls"] = [replica_url(hostvars[leaders[n]], leaders[n]) for n in batch["replicas"]]
    return result


def glm5_rollout_batch(rollout: Mapping[str, Any], batch_hosts: Sequence[str]) -> dict[str, Any]:
    """The plan's batch whose hosts the play runs now, with ``first`` and ``last`` among the rolled ones."""
    index = _guard(batch_index, rollout["batch_of"], [str(h) for h in batch_hosts])
    rolled = [b["index"] for b in rollout["batches"] if b["kind"] != "unchanged"]
    batch = dict(rollout["batches"][index])
    batch["first"] = bool(rolled) and index == rolled[0]
    batch["number"] = index + 1
    batch["of"] = len(rolled)
    return batch


def glm5_rollout_floor(
    listing: Mapping[str, Any], leaving: Sequence[str], floor: int, batch: str = ""
) -> dict:
    """``{ok, healthy, leaving, left, msg}``: may the batch leave, by the router's ``GET /workers``?"""
    return floor_check(healthy_workers(listing), [str(u) for u in leaving], int(floor), str(batch))


def glm5_rollout_budget(restored: Sequence[str], budget: int) -> dict[str, Any]:
    """``{ok, failed, msg}``: whether the replicas restored so far are within the failure budget."""
    return budget_check([str(r) for r in restored], int(budget))


def glm5_left_out(hosts: Sequence[str], hostvars: Any, budget: Any, stopped: str) -> dict[str, Any]:
    """``{ok, allowed, left_out, msg}``: whether the ``hosts`` (the play's) whose glm5_left_out says why they
    failed their checks are within the budget."""
    reasons = {str(h): str(hostvars[h]["glm5_left_out"]) for h in hosts if hostvars[h].get("glm5_left_out")}
    return _guard(left_out_check, reasons, len(hosts), budget, str(stopped))


def glm5_replica_urls(hosts: Sequence[str], hostvars: Any, groups: Mapping[str, Sequence[str]]) -> list[str]:
    """The router URLs of the replicas ``hosts`` belong to (each replica's rank 0), each once, in order."""
    plain = {str(k): [str(h) for h in v] for k, v in groups.items()}
    topology = _guard(replica_topology, plain.get("sglang_nodes", []), plain)
    leaders = [topology["hosts"].get(str(h), {"leader": str(h)})["leader"] for h in hosts]
    return [replica_url(hostvars[leader], leader) for leader in dict.fromkeys(leaders)]


def glm5_rollout_resume(marker_b64: Any, current_link: Any = "") -> dict[str, Any]:
    """A node's staging start: the interrupted switch's record to resume ({} without one), the release a
    failure restores, and whether its unit was already kept aside."""
    return _guard(resume_choice, marker_b64, current_link)


def glm5_rollback_release(named: Any, resume: Mapping[str, Any] | None, previous_link: Any = "") -> str:
    """The release a rollback goes back to ("" when there is none)."""
    return rollback_release(named, resume, previous_link)


def glm5_hosts_flagged(hosts: Sequence[str], hostvars: Any, var: str) -> list[str]:
    """The hosts (in their order) whose ``var`` is set and true: a batch's replicas with a switch to make, or
    those whose switch ended proven."""
    return [str(h) for h in hosts if hostvars[h].get(str(var))]


class FilterModule:
    """glm5-deploy rollout filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "glm5_rollout_plan": glm5_rollout_plan,
            "glm5_rollout_batch": glm5_rollout_batch,
            "glm5_rollout_floor": glm5_rollout_floor,
            "glm5_rollout_budget": glm5_rollout_budget,
            "glm5_left_out": glm5_left_out,
            "glm5_replica_urls": glm5_replica_urls,
            "glm5_rollout_resume": glm5_rollout_resume,
            "glm5_rollback_release": glm5_rollback_release,
            "glm5_hosts_flagged": glm5_hosts_flagged,
        }
