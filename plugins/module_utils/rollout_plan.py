"""The batches of a rolling update (or rollback), and the checks between them.

Pure functions over plain data, for the rollout's plan play (filter ``glm5_rollout_plan``), its batches
(``glm5_rollout_floor``, ``glm5_rollout_budget``), the unit tests and the rollout simulation of
docs/benchmarks.md (P7), which runs these very functions over a simulated fleet.

A plan is made after every replica staged the update, so it knows which replicas have something to change
(``pending``) and which carry the record of a switch an interrupted run left (``resume``):

- resumed replicas come first (an interrupted run may have left them out of the router), then the other
  pending replicas in inventory order; replicas with nothing to change are one last batch that changes
  nothing (its hosts only report "unchanged"), so a re-run after an interruption does not walk through the
  batches it already did;
- the first batch is the canary when one is asked for (``canary`` replicas), then batches of ``batch_size``;
- sizes are a count ("4", 4) or a percentage of the rolled replicas ("10%", rounded up, at least 1);
- the floor (``min_healthy``) is the number of replicas the router must still route to while a batch is out:
  a count, or a percentage of the fleet's replicas, rounded down. A plan whose largest batch cannot leave
  without breaking the floor even with every replica healthy is refused before any change;
- the failure budget is how many replicas may fail their switch, be restored and proven on their previous
  release, before the rollout stops (a count, or a percentage of the rolled replicas, rounded down).
"""

from __future__ import annotations

import base64
import json
import math
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


class PlanError(ValueError):
    """Rollout settings that make no plan."""


def amount(value: Any, total: int, name: str, *, round_up: bool) -> int:
    """``value`` (a count, or "N%" of ``total``) as a count. Percentages round up (at least 1 when above 0)
    or down; a count is taken as it is. Refuses anything else, naming ``name``."""
    if isinstance(value, bool):
        raise PlanError(f"{name} must be a count or a percentage like '10%', got {value!r}")
    text = str(value).strip()
    match = _PERCENT.match(text)
    if match:
        share = float(match.group(1))
        if share > 100:
            raise PlanError(f"{name} {value!r} is over 100%")
        exact = share * total / 100
        count = math.ceil(exact - 1e-9) if round_up else math.floor(exact + 1e-9)
        return max(count, 1) if round_up and share > 0 and total > 0 else count
    if re.fullmatch(r"\d+", text):
        return int(text)
    raise PlanError(f"{name} must be a count or a percentage like '10%', got {value!r}")


def settings(values: Mapping[str, Any], total: int, fleet: int) -> dict[str, int]:
    """The rollout's settings (the sglang_rolling_* variables, by their short names) as counts: ``total`` is
    the number of rolled replicas, ``fleet`` the fleet's."""
    size = amount(values.get("batch_size", 1), total, "sglang_rolling_replicas_per_batch", round_up=True)
    if size < 1:
        raise PlanError("sglang_rolling_replicas_per_batch must be 1 or more (or a percentage above 0)")
    pause = values.get("pause_seconds", 0)
    if isinstance(pause, bool) or not re.fullmatch(r"\d+", str(pause).strip()):
        raise PlanError(f"sglang_rolling_pause_seconds must be a whole number of seconds, got {pause!r}")
    return {
        "batch_size": size,
        "canary": amount(values.get("canary", 0), total, "sglang_rolling_canary", round_up=True),
        "floor": amount(values.get("min_healthy", 0), fleet, "sglang_rolling_min_healthy", round_up=False),
        "budget": amount(
            values.get("failure_budget", 0), total, "sglang_rolling_failure_budget", round_up=False
        ),
        "pause": int(str(pause).strip()),
    }


def plan(
    replicas: Sequence[Mapping[str, Any]],
    values: Mapping[str, Any],
    fleet: int | None = None,
) -> dict[str, Any]:
    """The batches for ``replicas`` (in inventory order, each ``{name, hosts, pending, resume}``).

    Returns ``{batches: [{index, kind, replicas, hosts}], serial, hosts, batch_of, settings, lines}``:
    ``serial`` is the play's serial (hosts per batch, the last batch the unchanged replicas), ``hosts`` the
    order the play must list its hosts in, ``batch_of`` each host's batch index.
    """
    total = len(replicas)
    fleet = total if fleet is None else max(int(fleet), total)
    sets = settings(values, total, fleet)
    pending = [r for r in replicas if r.get("pending") or r.get("resume")]
    order = [r for r in pending if r.get("resume")] + [r for r in pending if not r.get("resume")]
    unchanged = [r for r in replicas if not (r.get("pending") or r.get("resume"))]

    groups: list[tuple[str, list[Mapping[str, Any]]]] = []
    rest = order
    if sets["canary"] and rest:
        groups.append(("canary", rest[: sets["canary"]]))
        rest = rest[sets["canary"] :]
    step = sets["batch_size"]
    groups += [("batch", rest[i : i + step]) for i in range(0, len(rest), step)]
    widest = max((len(members) for _kind, members in groups), default=0)
    if widest and fleet - widest < sets["floor"]:
        raise PlanError(
            f"a batch of {widest} replica(s) would leave {fleet - widest} of the fleet's {fleet} "
            f"in the router, under the floor of {sets['floor']} (sglang_rolling_min_healthy); make the "
            "batches (sglang_rolling_replicas_per_batch, sglang_rolling_canary) smaller or the floor lower"
        )
    if unchanged:
        groups.append(("unchanged", unchanged))

    batches = [
        {
            "index": i,
            "kind": kind,
            "replicas": [r["name"] for r in members],
            "hosts": [h for r in members for h in r["hosts"]],
        }
        for i, (kind, members) in enumerate(groups)
    ]
    rolled = [b for b in batches if b["kind"] != "unchanged"]
    lines = [
        f"{len(pending)} of {total} replica(s) to switch"
        + (
            f" ({sum(1 for r in pending if r.get('resume'))} resumed after an interruption)"
            if any(r.get("resume") for r in pending)
            else ""
        )
        + f", in {len(rolled)} batch(es)"
        + (f": a canary of {sets['canary']}, then" if sets["canary"] and rolled else ":")
        + f" {step} replica(s) at a time; floor {sets['floor']} of {fleet} in the router; failure budget "
        f"{sets['budget']}; pause {sets['pause']} s between batches"
    ]
    lines += [f"batch {b['index'] + 1} ({b['kind']}): {', '.join(b['replicas'])}" for b in rolled]
    if unchanged:
        lines.append(f"nothing to change: {', '.join(r['name'] for r in unchanged)}")
    return {
        "batches": batches,
        "serial": [len(b["hosts"]) for b in batches],
        "hosts": [h for b in batches for h in b["hosts"]],
        "batch_of": {h: b["index"] for b in batches for h in b["hosts"]},
        "settings": sets,
        "lines": lines,
    }


def floor_check(
    healthy: Iterable[str], leaving: Iterable[str], floor: int, batch: str = ""
) -> dict[str, Any]:
    """May a batch whose replicas have the router URLs ``leaving`` leave, with the router routing to
    ``healthy`` now? Only leaving replicas the router routes to count against the floor."""
    now = {u.rstrip("/") for u in healthy}
    gone = {u.rstrip("/") for u in leaving} & now
    left = len(now) - len(gone)
    ok = left >= int(floor)
    msg = (
        f"{batch + ': ' if batch else ''}{len(now)} replica(s) healthy in the router; "
        f"the batch takes out {len(gone)} of them and leaves {left}"
        + (
            ""
            if ok
            else f", under the floor of {floor} (sglang_rolling_min_healthy): the rollout stops here, "
            "before this batch leaves the router; bring the missing replicas back (or lower the floor) and "
            "run "
            "the same command again"
        )
    )
    return {"ok": ok, "healthy": len(now), "leaving": len(gone), "left": left, "msg": msg}


def budget_check(restored: Sequence[str], budget: int) -> dict[str, Any]:
    """May the rollout go on after the replicas in ``restored`` failed their switch (and were restored)?"""
    failed = list(dict.fromkeys(restored))
    ok = len(failed) <= int(budget)
    msg = (
        f"{len(failed)} replica(s) failed their switch and were restored ({', '.join(failed) or 'none'}); "
        f"failure budget {budget} (sglang_rolling_failure_budget)"
        + ("" if ok else ": the rollout stops here; no later batch starts")
    )
    return {"ok": ok, "failed": failed, "msg": msg}


def batch_index(batch_of: Mapping[str, int], batch_hosts: Sequence[str]) -> int:
    """The index of the batch the play runs now (from its hosts)."""
    indices = {batch_of[h] for h in batch_hosts if h in batch_of}
    if len(indices) != 1:
        raise PlanError(f"the play's batch {list(batch_hosts)} is not one batch of the plan")
    return indices.pop()


def rolled_replicas(
    topology: Mapping[str, Any], hosts: Sequence[str], info: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The replicas to plan, from the fleet's ``topology`` and the hosts still in the run (``hosts``, in the
    play's order) with what staging found on each (``info``: ``{host: {pending, resume, settings}}``).

    A replica is planned when every one of its hosts is still in the run; one with a host that failed
    before (preflight, staging) is left out whole. The settings must be the same on every host: they are
    the fleet's, and a plan cannot follow two of them. Returns ``{replicas, left_out, values, fleet}``.
    """
    live = set(hosts)
    replicas, left_out = [], []
    for replica in topology["replicas"]:
        members = replica["hosts"]
        inside = [h for h in members if h in live]
        if not inside:
            continue
        if len(inside) != len(members):
            left_out.append(
                {
                    "replica": replica["name"],
                    "hosts": [h for h in members if h not in live],
                    "why": "a node of the replica is no longer in the run",
                }
            )
            continue
        replicas.append(
            {
                "name": replica["name"],
                "hosts": list(members),
                "leader": replica["leader"],
                "pending": any(bool(info.get(h, {}).get("pending")) for h in members),
                "resume": any(bool(info.get(h, {}).get("resume")) for h in members),
            }
        )
    seen: dict[str, tuple[Any, str]] = {}
    for host in hosts:
        for key, value in (info.get(host, {}).get("settings") or {}).items():
            first = seen.setdefault(key, (value, host))
            if str(first[0]) != str(value):
                raise PlanError(
                    f"the rollout's {key} differs between hosts ({first[1]}: {first[0]!r}, "
                    f"{host}: {value!r}); "
                    "it is the fleet's setting: give it once (group_vars/sglang_nodes or -e)"
                )
    return {
        "replicas": replicas,
        "left_out": left_out,
        "values": {k: v for k, (v, _host) in seen.items()},
        "fleet": len(topology["replicas"]),
    }


def left_out_check(reasons: Mapping[str, str], nodes: int, budget: Any, stopped: str) -> dict[str, Any]:
    """Nodes that failed their own checks (``reasons``: host -> why) out of the play's ``nodes``: within the
    budget (preflight_node_failure_budget: a count, or a percentage of the nodes rounded down) they are left
    out and the others go on; past it everything stops (``stopped`` begins that message)."""
    allowed = amount(budget, nodes, "preflight_node_failure_budget", round_up=False)
    named = "; ".join(f"{host}: {why}" for host, why in reasons.items())
    ok = len(reasons) <= allowed
    if ok:
        msg = (
            f"{len(reasons)} of {nodes} node(s) left out of this run ({named}); "
            f"within the budget of {allowed} "
            "(preflight_node_failure_budget), the others go on"
            if reasons
            else f"no node left out of {nodes}"
        )
    else:
        msg = (
            f"{stopped}: {len(reasons)} of {nodes} node(s) failed, more than the budget of {allowed} "
            f"(preflight_node_failure_budget) allows: {named}. Nothing was changed on any node's service in "
            "this "
            "run: every replica still serves what it served when the run began"
        )
    return {"ok": ok, "allowed": allowed, "left_out": sorted(reasons), "msg": msg}


# --------------------------------------------------------------------------------------------------------
# One node's choice while staging: resume an interrupted switch, or start from the running release
# --------------------------------------------------------------------------------------------------------


def _release_of(link_target: Any) -> str:
    """A release's name from a link's target (/opt/sglang/releases/<name> -> <name>); "" for none."""
    return posixpath.basename(str(link_target or ""))


# What an operator does about a switch record that cannot be read (sglang_rollout_state_dir/switch.json).
UNREADABLE = (
    ": find which release and unit the node serves (its current release link, systemctl cat sglang), put it "
    "back in the router if it is healthy, then remove the record and run the rollout again"
)


def resume_choice(marker_b64: Any, current_link: Any) -> dict[str, Any]:
    """What a node's staging starts from, given the switch record an interrupted run left on it (the marker
    file's content, base64 as slurp reads it; empty when there is none) and the target of its ``current``
    link.

    Returns ``{resume, previous_release, touched}``: ``resume`` the record ({} without one), whose switch this
    run finishes; ``previous_release`` the release a failure restores (the interrupted switch's
    ``release_from``, else the running one); ``touched`` whether the node's unit and environment were already
    kept aside (a resumed switch), so that a failure from here restores them. A record that cannot be read
    is refused: resuming from a guess could restore the wrong release."""
    resume: dict[str, Any] = {}
    if marker_b64:
        try:
            resume = json.loads(base64.b64decode(str(marker_b64)).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise PlanError(
                f"the record of an interrupted switch cannot be read ({exc}){UNREADABLE}"
            ) from exc
        if not isinstance(resume, dict):
            raise PlanError(f"the record of an interrupted switch is not a mapping{UNREADABLE}")
    previous = resume["release_from"] if "release_from" in resume else _release_of(current_link)
    return {"resume": resume, "previous_release": str(previous), "touched": bool(resume)}


def rollback_release(named: Any, resume: Mapping[str, Any] | None, previous_link: Any) -> str:
    """The release a rollback goes back to: the one named (sglang_rollback_release); after an interrupted
    run, the interrupted rollback's target, or the release the node served before the interrupted update (the
    ``previous`` link may already have moved); else the ``previous`` link's release. "" when there is none."""
    if named:
        return str(named)
    if resume:
        key = "release_to" if resume.get("kind") == "rollback" else "release_from"
        return str(resume.get(key) or "")
    return _release_of(previous_link)
