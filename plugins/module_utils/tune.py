"""Choosing among tuning candidates (playbooks/tune.yml): pure functions, unit-tested.

Each candidate was rolled out on one node (the inference check must pass) and benchmarked there with sglang's
serving benchmark. A result is {name, settings, passed, error, rows}; rows are the benchmark's records
(bench_report.parse_records). The fastest candidate that passed is suggested, never applied.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

METRICS = ("output_throughput", "request_throughput", "total_throughput")


class TuneError(ValueError):
    """Results that cannot be ranked."""


def score(result: Mapping[str, Any], metric: str) -> float | None:
    """The candidate's figure: the metric summed over its benchmark's levels (None when it failed)."""
    if metric not in METRICS:
        raise TuneError(f"sglang_tune_metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if not result.get("passed"):
        return None
    rows = result.get("rows") or []
    if not rows:
        raise TuneError(f"candidate {result.get('name')!r} passed but has no benchmark records")
    return float(sum(float(row[metric]) for row in rows))


def rank(results: Sequence[Mapping[str, Any]], metric: str) -> dict[str, Any]:
    """{best: the fastest passing result or None, table: [{name, passed, score, error}] fastest first}."""
    names = [r.get("name") for r in results]
    if len(set(names)) != len(names):
        raise TuneError(f"candidate names must be unique, got {names}")
    table = [
        {
            "name": r["name"],
            "passed": bool(r.get("passed")),
            "score": score(r, metric),
            "error": r.get("error", ""),
        }
        for r in results
    ]
    table.sort(key=lambda row: (row["score"] is None, -(row["score"] or 0.0)))
    best_name = table[0]["name"] if table and table[0]["score"] is not None else None
    best = next((r for r in results if r["name"] == best_name), None)
    return {"best": best, "table": table}


def suggestion(host: str, ranking: Mapping[str, Any], base: Mapping[str, Any], metric: str, date: str) -> str:
    """A host_vars file for ``host`` with the best candidate's settings, and why, as comments."""
    # PyYAML ships with ansible-core; imported here, as sglang_flags.load_yaml does: a module_utils file may
    # import only the standard library and ansible at import time (ansible-test sanity's import test).
    import yaml

    best = ranking["best"]
    if best is None:
        raise TuneError("no candidate passed the inference check: nothing to suggest")
    lines = [
        "---",
        f"# Suggested by playbooks/tune.yml on {date} for {host}: review it, then copy it to",
        f"# inventory/<site>/host_vars/{host}.yml (or group_vars) yourself. Nothing applied it.",
        f"# Candidates, fastest first ({metric}, summed over the benchmark's levels):",
    ]
    for row in ranking["table"]:
        figure = f"{row['score']:.2f}" if row["score"] is not None else f"failed: {row['error']}"[:200]
        lines.append(f"#   {row['name']}: {figure}")
    # Through JSON: plain types for the YAML dumper (Ansible hands filters tagged str and dict subclasses).
    settings = json.loads(json.dumps({**dict(base), **dict(best["settings"])}))
    lines.append(
        yaml.safe_dump({"sglang_settings": settings}, default_flow_style=False, sort_keys=True).rstrip()
    )
    return "\n".join(lines) + "\n"
