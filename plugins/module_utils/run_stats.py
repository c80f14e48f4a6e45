"""What a run publishes with set_stats (pure functions): the results an AWX/AAP workflow branches on, kept
in the job's artifacts (ansible-runner's artifact_data).

``fleet_stats`` (site.yml and validate.yml, at the summary): per replica the verdict and its symptom, where
the router has it, its release, profile and evidence level; the endpoint, the model and the checkpoint's
revision; counts. ``rollout_entry`` (rolling_update.yml and rollback.yml, per replica as its batch ends): what
became of the replica, aggregated by set_stats into one mapping per run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import (
    FAILED,
    host_row,
    validation_verdict,
)


def _symptom(hostvars: Mapping[str, Any]) -> str:
    if hostvars.get("glm5_left_out"):  # failed its own checks (preflight, staging) or unreachable
        return f"left out of the run: {hostvars['glm5_left_out']}"
    validation = hostvars.get("sglang_validate_result") or {}
    if validation_verdict(validation) == FAILED:
        return str(validation.get("msg") or "inference check failed")
    start = hostvars.get("sglang_server_health")
    if not validation and isinstance(start, Mapping) and start.get("verdict") not in (None, "healthy"):
        return str(start.get("symptom") or "it did not start")
    return ""


def replica_stats(host: str, hostvars: Mapping[str, Any]) -> dict[str, Any]:
    """One host's results: verdict (passed, FAILED, FAILED at start, LEFT OUT, or '-' when not judged),
    symptom, router (in, out, kept or '-'), release, profile, evidence level and checkpoint revision."""
    row = host_row(host, hostvars)
    launch = hostvars.get("sglang_launch") or {}
    return {
        "verdict": row["validated"],
        "symptom": _symptom(hostvars),
        "router": str(hostvars.get("sglang_router_replica") or "-"),
        "release": row["release"],
        "profile": f"{launch.get('arch')}/{launch.get('lane')}" if launch else "-",
        "evidence": str((launch.get("evidence") or {}).get("level") or "-") if launch else "-",
        "checkpoint_revision": str(hostvars.get("model_checkpoint_revision") or "-"),
    }


def _one(values: Iterable[str]) -> str:
    """The value every host agrees on; several joined with ', '; '-' for none."""
    seen = sorted({v for v in values if v and v != "-"})
    return ", ".join(seen) if seen else "-"


def fleet_stats(
    hosts: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]], endpoint: str
) -> dict[str, Any]:
    """The run's results for set_stats: ``{replicas: {host: replica_stats}, endpoint, model,
    checkpoint_revision, release, evidence, passed, failed, routed}``."""
    hosts = list(hosts)
    replicas = {h: replica_stats(h, hostvars[h]) for h in hosts}
    models = (
        str(
            hostvars[h].get("model_checkpoint_repo")
            or (hostvars[h].get("sglang_launch") or {}).get("model")
            or ""
        )
        for h in hosts
    )
    return {
        "endpoint": endpoint or "-",
        "model": _one(models),
        "checkpoint_revision": _one(r["checkpoint_revision"] for r in replicas.values()),
        "release": _one(r["release"] for r in replicas.values()),
        "evidence": _one(r["evidence"] for r in replicas.values()),
        "passed": sum(r["verdict"] == "passed" for r in replicas.values()),
        "failed": sum(r["verdict"].startswith("FAILED") for r in replicas.values()),
        "routed": sum(r["router"] == "in" for r in replicas.values()),
        "left_out": sum(r["verdict"] == "LEFT OUT" for r in replicas.values()),
        "replicas": replicas,
    }


def rollout_entry(host: str, hostvars: Mapping[str, Any], outcome: str) -> dict[str, dict[str, Any]]:
    """``{host: {outcome, symptom, ...replica_stats}}`` for a replica whose batch ended: outcome updated,
    restored (the update failed; the previous release serves again) or restore failed (out of the router)."""
    entry = replica_stats(host, hostvars)
    failure = str(hostvars.get("sglang_rollout_failure") or "")
    restore = str(hostvars.get("sglang_rollout_restore_failure") or "")
    entry["outcome"] = outcome
    if outcome != "updated":
        entry["symptom"] = "; ".join(w for w in (failure, restore and f"restore: {restore}") if w)
    return {host: entry}
