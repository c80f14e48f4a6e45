"""Bad inputs against the lab: site.yml must refuse each one before any host changes, naming the variable.

Every case runs the real site.yml at -vvv through ansible-runner against the converged lab. A case passes when
the run fails, no task reported a change, no task ran outside the two checking plays (inputs and preflight),
a failure message names the variable (or group) to fix, and no secret is in the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, Run, leaks

CHECKING_PLAYS = {
    "Check the inventory's inputs before anything changes",
    "Preflight checks on the GPU nodes, before anything changes",
}
ONE_NODE = "gpu-node-1:lab-gateway"
BAD_REVISION = "0123456789abcdef0123456789abcdef01234567"


@dataclass(frozen=True)
class Case:
    """One bad input: extra vars or an inventory of its own, and the words its refusal must contain."""

    name: str
    names: tuple[str, ...]
    extravars: dict[str, Any] = field(default_factory=dict)
    hosts: dict[str, Any] | None = None  # an inventory (hosts.yml) that replaces the lab's groups
    limit: str = ONE_NODE


def lab_hosts(**groups: Any) -> dict[str, Any]:
    """The lab's hosts.yml with ``groups`` (name -> hosts mapping or None) laid over its groups."""
    doc = yaml.safe_load((ROOT / "inventory" / "lab" / "hosts.yml").read_text())
    children = doc["all"]["children"]
    for name, hosts in groups.items():
        children[name] = {"hosts": hosts}
        children["lab"]["children"].setdefault(name, None)
    return doc


NODES = {h: {"ansible_host": f"glm5-lab-{h}"} for h in ("gpu-node-1", "gpu-node-2", "gpu-node-3")}

CASES = [
    # Types and choices, from the roles' argument specs.
    Case("port-not-an-int", ("sglang_server_port",), {"sglang_server_port": "thirty"}),
    Case("bool-not-a-bool", ("sglang_server_start",), {"sglang_server_start": "maybe"}),
    Case("settings-not-a-mapping", ("sglang_settings",), {"sglang_settings": "tp_size=8"}),
    Case("environment-not-a-mapping", ("sglang_server_environment",), {"sglang_server_environment": ["A=1"]}),
    Case(
        "disk-floor-not-a-number", ("preflight_min_free_disk_gib",), {"preflight_min_free_disk_gib": "lots"}
    ),
    Case("workers-not-an-int", ("model_checkpoint_max_workers",), {"model_checkpoint_max_workers": [8]}),
    Case("unknown-arch", ("sglang_profile",), {"sglang_profile": "sm75"}),
    Case("missing-lane", ("sglang_lane",), {"sglang_lane": "nightly"}),
    Case("unknown-router-policy", ("sglang_router_policy",), {"sglang_router_policy": "fastest"}),
    Case(
        "secret-not-a-string",
        ("sglang_server_api_key", "must be a string"),
        {"sglang_server_api_key": {"k": 1}},
    ),
    # Rules across variables.
    Case("port-out-of-range", ("sglang_server_port", "1-65535"), {"sglang_server_port": 70000}),
    Case(
        "ports-collide", ("sglang_server_dist_port", "sglang_server_port"), {"sglang_server_dist_port": 30000}
    ),
    Case("router-ports-collide", ("sglang_router_metrics_port",), {"sglang_router_metrics_port": 30000}),
    Case(
        "open-bind-without-key",
        ("sglang_server_host", "sglang_server_api_key"),
        {"sglang_server_host": "0.0.0.0", "sglang_server_api_key": ""},
    ),
    Case("repo-not-org-name", ("model_checkpoint_repo",), {"model_checkpoint_repo": "GLM-5-NVFP4"}),
    Case("empty-revision", ("model_checkpoint_revision",), {"model_checkpoint_revision": ""}),
    # The hub is asked from the node: a repository or a revision it does not have.
    Case(
        "missing-model-repo", ("model_checkpoint_repo",), {"model_checkpoint_repo": "glm5-lab/no-such-model"}
    ),
    Case("missing-revision", ("model_checkpoint_revision",), {"model_checkpoint_revision": BAD_REVISION}),
    # The launch, resolved from the data on the node.
    Case("tp-larger-than-gpus", ("preflight_tp_size", "8 GPU(s)"), {"preflight_tp_size": 16}),
    Case("tp-does-not-divide", ("preflight_tp_size", "does not divide"), {"preflight_tp_size": 3}),
    Case(
        "unknown-backend",
        ("sglang_settings.attention_backend", "choices"),
        {"sglang_settings": {"attention_backend": "warp_drive"}},
    ),
    Case("unknown-flag", ("sglang_settings.tp_sise",), {"sglang_settings": {"tp_sise": 8}}),
    Case(
        "malformed-json-setting",
        ("sglang_settings.json_model_override_args", "not valid JSON"),
        {"sglang_settings": {"json_model_override_args": '{"rope_scaling": '}},
    ),
    Case(
        "known-bad-combination",
        ("sm120-dsa-decode-flashmla-nan", "sglang_allow_known_bad"),
        {
            "sglang_profile": "sm120",
            "sglang_lane": "seed",
            "sglang_settings": {"dsa_decode_backend": "flashmla_kv"},
        },
    ),
    Case(
        "unsupported-os", ("preflight_supported_os", "debian12"), {"preflight_supported_os": ["ubuntu2404"]}
    ),
    # The inventory's shape.
    Case(
        "empty-node-group", ("sglang_nodes",), hosts=lab_hosts(sglang_nodes=None, lab_spare=NODES), limit=""
    ),
    Case(
        "empty-replica-group",
        ("sglang_replica_pair",),
        hosts=lab_hosts(sglang_replica_pair=None),
        limit="",
    ),
    Case(
        "replica-member-not-a-node",
        ("sglang_replica_pair", "sglang_nodes"),
        hosts=lab_hosts(sglang_replica_pair={"gpu-node-3": None, "lab-gateway": None}),
        limit="",
    ),
    Case(
        "unreachable-rank-0",
        ("sglang_server_advertise_host", "rank0.invalid"),
        hosts=lab_hosts(
            sglang_replica_pair={
                "gpu-node-2": {"sglang_server_advertise_host": "rank0.invalid"},
                "gpu-node-3": None,
            }
        ),
        limit="",
    ),
]


def failure_text(run: Run) -> str:
    """Every failure message of the run, as one string."""
    parts = []
    for event in run.events:
        if event.get("event") == "runner_on_failed":
            res = event["event_data"].get("res", {})
            parts.append(str(res.get("msg", "")))
            parts.append(str(res.get("results", "")))
    return "\n".join(parts)


def test_the_suite_has_at_least_25_cases() -> None:
    assert len(CASES) >= 25
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_input_is_refused_before_any_change(case: Case, run_playbook, tmp_path: Path) -> None:
    inventory = None
    if case.hosts is not None:
        inventory = tmp_path / "inventory"
        inventory.mkdir()
        (inventory / "hosts.yml").write_text(yaml.safe_dump(case.hosts))
        (inventory / "group_vars").symlink_to(ROOT / "inventory" / "lab" / "group_vars")
    run = run_playbook(
        "site.yml",
        extravars=case.extravars,
        cmdline=f"--limit {case.limit}" if case.limit else "",
        inventory=inventory,
        verbosity=3,
    )
    assert run.status == "failed", f"{case.name}: the run was not refused"
    assert "task path:" in run.stdout, "no -vvv output"
    assert leaks(run.stdout) == [], f"{case.name}: a secret in the -vvv output"
    ran = [e["event_data"] for e in run.events if e.get("event", "").startswith("runner_on_")]
    outside = sorted({d.get("play", "") for d in ran} - CHECKING_PLAYS)
    assert not outside, f"{case.name}: tasks ran past the checks, in {outside}"
    changed = [f"{d['host']}: {d.get('task')}" for d in ran if (d.get("res") or {}).get("changed")]
    assert not changed, f"{case.name}: changed before the refusal: {changed}"
    text = failure_text(run)
    for word in case.names:
        assert word in text, f"{case.name}: the refusal does not name {word!r}:\n{text[:3000]}"
