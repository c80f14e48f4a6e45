#!/usr/bin/env python3
"""A discrete-event simulation of a rolling update over the real planner (module_utils/rollout_plan.py).

    python lab/bench/rollout_sim.py [--json FILE]

The fleet is simulated; the decisions are not: the batches come from plan(), the check before each batch
leaves from floor_check() and the check after it from budget_check(), the very functions the roll play runs.
A batch's replicas go through their phases side by side (drain, switch, start, inference check, back into the
router); the batch ends when its slowest replica is back, then the pause, then the next batch's floor check.
A replica named to fail fails its inference check and is restored (its previous release started and proven
again) before it goes back in; it counts against the failure budget. Phase durations are drawn uniformly
from the ranges of a profile (seeded: the same run gives the same figures):

  hardware: GLM-5-NVFP4 on an SM120 node: a 7-8 minute start (docs/sources/sglang-facts.md: "Startup of
            GLM-5 on 8x RTX PRO 6000 takes about 7-8 minutes"), a 1-2 minute inference check (long-context
            and concurrency probes), up to a minute of drain;
  lab:      the lab's tiny model on the CPU (docs/journal/measurements.md: a start of 25-45 s, the check
            10-20 s).

Prestaging (release install, checkpoint download and verification) happens before the first batch, for the
whole fleet, and is not part of these figures. A benchmark: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
sys.path.insert(0, str(ROOT / "lab" / "bench"))
from benchlib import rollout_sim_row  # noqa: E402
from rollout_plan import budget_check, floor_check, plan  # noqa: E402

# Seconds (low, high) per phase of one replica's switch.
PROFILES: dict[str, dict[str, tuple[float, float]]] = {
    "hardware": {
        "drain": (5, 60),
        "switch": (5, 15),
        "start": (420, 480),
        "check": (60, 120),
        "back": (5, 20),
    },
    "lab": {"drain": (1, 3), "switch": (2, 4), "start": (25, 45), "check": (10, 20), "back": (2, 5)},
}

# The role's defaults (roles/sglang_rollout/defaults/main.yml), by the planner's names.
_DEFAULTS = yaml.safe_load((ROOT / "roles" / "sglang_rollout" / "defaults" / "main.yml").read_text())
DEFAULTS = {
    key: _DEFAULTS[f"sglang_rolling_{name}"]
    for key, name in (
        ("batch_size", "replicas_per_batch"),
        ("canary", "canary"),
        ("min_healthy", "min_healthy"),
        ("failure_budget", "failure_budget"),
        ("pause_seconds", "pause_seconds"),
    )
}

SCENARIOS: list[dict[str, Any]] = [
    {"name": "256 replicas, the defaults (one at a time)", "replicas": 256, "values": DEFAULTS},
    {
        "name": "256 replicas, canary 1, then 10%",
        "replicas": 256,
        "values": {"batch_size": "10%", "canary": 1, "min_healthy": "80%"},
    },
    {
        "name": "256 replicas, canary 1, then 10%, a pause of 5 min",
        "replicas": 256,
        "values": {"batch_size": "10%", "canary": 1, "min_healthy": "80%", "pause_seconds": 300},
    },
    {
        "name": "256 replicas, 10%, one failing node, budget 2",
        "replicas": 256,
        "values": {"batch_size": "10%", "canary": 1, "min_healthy": "80%", "failure_budget": 2},
        "failing": ["r100"],
    },
    {
        "name": "256 replicas, 10%, one failing node, budget 0",
        "replicas": 256,
        "values": {"batch_size": "10%", "canary": 1, "min_healthy": "80%", "failure_budget": 0},
        "failing": ["r100"],
    },
    {"name": "64 replicas, 25%", "replicas": 64, "values": {"batch_size": "25%", "min_healthy": "50%"}},
]


def url(name: str) -> str:
    return f"http://{name}:30000"


def simulate(
    replicas: int, values: dict[str, Any], profile: str, failing: list[str] | None = None, seed: int = 1
) -> dict[str, Any]:
    """One rollout of ``replicas`` one-node replicas (every one with something to change)."""
    rng = random.Random(seed)
    phases = PROFILES[profile]
    fleet = [{"name": f"r{i}", "hosts": [f"n{i}"], "pending": True} for i in range(replicas)]
    rollout = plan(fleet, values, fleet=replicas)
    floor, budget, pause = (rollout["settings"][k] for k in ("floor", "budget", "pause"))
    in_router = {r["name"] for r in fleet}
    clock, fewest, restored, stopped, batches = 0.0, replicas, [], "", 0

    def draw(phase: str) -> float:
        low, high = phases[phase]
        return rng.uniform(low, high)

    for batch in (b for b in rollout["batches"] if b["kind"] != "unchanged"):
        if batches:
            clock += pause
        check = floor_check([url(n) for n in in_router], [url(n) for n in batch["replicas"]], floor)
        if not check["ok"]:
            stopped = check["msg"]
            break
        batches += 1
        in_router -= set(batch["replicas"])
        fewest = min(fewest, len(in_router))
        ends = []
        for name in batch["replicas"]:
            took = draw("drain") + draw("switch") + draw("start") + draw("check")
            if name in (failing or []):  # failed its check: the previous release started and proven again
                took += draw("switch") + draw("start") + draw("check")
                restored.append(name)
            ends.append(took + draw("back"))
        clock += max(ends)
        in_router |= set(batch["replicas"])
        verdict = budget_check(restored, budget)
        if not verdict["ok"]:
            stopped = verdict["msg"]
            break
    return {
        "batches_planned": sum(1 for b in rollout["batches"] if b["kind"] != "unchanged"),
        "batches_run": batches,
        "hours": round(clock / 3600, 2),
        "fewest_in_router": fewest,
        "floor": floor,
        "restored": restored,
        "stopped": stopped,
    }


def run_all() -> dict[str, Any]:
    results = []
    for scenario in SCENARIOS:
        entry = {
            "name": scenario["name"],
            "values": scenario["values"],
            "failing": scenario.get("failing", []),
        }
        for profile in PROFILES:
            entry[profile] = simulate(
                scenario["replicas"], scenario["values"], profile, scenario.get("failing")
            )
        results.append(entry)
    return {"benchmark": "rollout_sim", "profiles": PROFILES, "scenarios": results}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    record = run_all()
    print(rollout_sim_row(record)[0].replace("; ", "\n"))
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
