"""Inputs checks, the nodes: the checkpoint's pin, GPUs per node, a lost GPU, the OS.

Each check returns a list of problems, one sentence each, that names the variable to change; an empty list
means the input is fine. Pure functions over plain data, shared by the preflight role's filters
(plugins/filter/inputs.py) and the unit tests. A secret's value (a no_log option) is never part of a
message, nor is a URL that carries credentials.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

REPO_RE = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def checkpoint_problems(repo: str, revision: str, source_path: str = "") -> list[str]:
    """The checkpoint's repository must be org/name and its revision pinned (unless copied from a path)."""
    if source_path:
        return []
    problems = []
    if not REPO_RE.fullmatch(str(repo)):
        problems.append(
            f"model_checkpoint_repo must be a Hugging Face repository, org/name; got {json.dumps(str(repo))}"
        )
    if not str(revision or "").strip():
        problems.append("model_checkpoint_revision is empty: pin the commit id to deploy")
    return problems


def gpu_problems(gpu_count: int, tp_size: int, *, host: str, var: str) -> list[str]:
    """A node's GPU count must hold its share of the tensor-parallel group, and be a multiple of it."""
    if tp_size < 1:
        return [f"{var} must be at least 1, got {tp_size}"]
    if gpu_count < tp_size:
        return [
            f"{host} has {gpu_count} GPU(s) but {var} is {tp_size}. Lower {var} for this host or group, or "
            "split the replica across nodes"
        ]
    if gpu_count % tp_size:
        return [
            f"{var} is {tp_size}, which does not divide the {gpu_count} GPU(s) of {host}; use a divisor of "
            f"{gpu_count}"
        ]
    return []


def lost_gpu_problems(
    now: Mapping[str, Any],
    recorded: Mapping[str, Any] | None,
    *,
    host: str,
    tp_size: int | None = None,
    tp_var: str = "preflight_tp_size",
) -> list[str]:
    """Before a replica leaves the router: the node still has the GPUs it was deployed with (the facts
    preflight recorded, /etc/ansible/facts.d/glm5_gpu.fact), of the same architecture. ``recorded`` None: no
    record (preflight_record_facts false, or the file removed): only ``tp_size``, the GPUs the node must
    have for its share of the replica, is checked."""
    recorded = recorded or {}
    kept = "The replica was not taken out of the router and still serves on its current release"
    missing = "a GPU is missing or fell off the bus (nvidia-smi, dmesg for Xid errors)"
    problems = []
    count, had = int(now.get("count") or 0), int(recorded.get("count") or 0)
    if count < had:
        problems.append(
            f"{host} sees {count} GPU(s) where it was deployed with {had}: {missing}. {kept}; fix the node, "
            "or leave it out of the rollout with --limit"
        )
    arch, had_arch = str(now.get("arch") or ""), str(recorded.get("arch") or "")
    if had_arch and arch != had_arch:
        problems.append(
            f"{host} reports GPU architecture {arch or 'none'} where it was deployed on {had_arch}. {kept}; "
            "run site.yml on it (preflight reads its GPUs again)"
        )
    if not problems and tp_size and count < int(tp_size):
        problems.append(f"{host} sees {count} GPU(s), fewer than {tp_var} ({tp_size}): {missing}. {kept}")
    return problems


def os_problems(distribution: str, version: str, supported: Iterable[str], *, host: str) -> list[str]:
    """The node's OS (distribution + major version, e.g. debian12) must be one the roles support."""
    name = f"{str(distribution).lower()}{str(version).replace('.', '')}"
    wanted = list(supported)
    if name in wanted:
        return []
    return [
        f"{host} runs {distribution} {version} ({name}); the roles support {', '.join(wanted)} "
        "(preflight_supported_os, from the CUDA repositories NVIDIA publishes)"
    ]
