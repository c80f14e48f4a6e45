#!/usr/bin/env python3
"""Controller cost per host as the fleet grows: controller-only plays over synthetic inventories.

    python lab/bench/controller_scale.py [--sizes 16,256,1024] [--json FILE]

For each size N, an inventory of N GPU nodes and a router host, every one with the local connection (no play
here connects anywhere: the plays below run action plugins on the controller only), the lab's group_vars and
every 8th pair of nodes a two-node replica. Then, each a run of the real ansible-playbook, its CPU seconds
(the process and its children: the forks) measured:

  fixed       one play on localhost alone: what any run costs before its first host;
  baseline    one trivial task on every node: the per-host-task cost of Ansible itself;
  inputs      playbooks/inputs.yml, as every run starts (groups, then every host's inputs);
  plan        playbooks/rollout.yml's plan play (stand-in staging: every node has something to change);
  expressions every role's per-host expressions that read the fleet (topology, a replica's place, its peers
              and members, its URL in the router, its firewall's sources), evaluated on every node.

The per-host cost of a play is (its CPU - fixed) / N; of the expressions, (their CPU - baseline) / N. What
carries over is the ratio at 1024 (and 256) hosts against 16: a cost that does not grow with the fleet stays
near 1. A benchmark: it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")

# Role variables (vars/main.yml) that read the fleet, per role: each node evaluates them.
EXPRESSIONS = {
    "sglang_router": [
        "__sglang_router_place",
        "__sglang_router_replica_leader",
        "__sglang_router_replica_url",
    ],
    "sglang_rollout": ["__sglang_rollout_place", "__sglang_rollout_members", "__sglang_rollout_leader"],
    "sglang_validate": ["__sglang_validate_rank"],
    "sglang_server": ["__sglang_server_place", "__sglang_server_replica_settings", "__sglang_server_ca"],
    "node_firewall": ["__node_firewall_peers", "__node_firewall_names"],
}


def inventory(path: Path, nodes: int) -> Path:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    names = [f"n{i:04d}" for i in range(1, nodes + 1)]
    children: dict[str, Any] = {
        "sglang_nodes": {"hosts": {n: dict(local) for n in names}},
        "sglang_router": {"hosts": {"gw": dict(local)}},
    }
    for first in range(0, nodes - 1, 16):  # a two-node replica every 16 nodes
        children[f"sglang_replica_r{first:04d}"] = {"hosts": {names[first]: None, names[first + 1]: None}}
    children["lab"] = {"children": {"sglang_nodes": None, "sglang_router": None}}
    path.mkdir(parents=True)
    (path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": children}}, sort_keys=False))
    shutil.copytree(ROOT / "inventory" / "lab" / "group_vars", path / "group_vars")
    lab = yaml.safe_load((ROOT / "inventory" / "lab" / "group_vars" / "lab.yml").read_text())
    lab = {
        k: v
        for k, v in lab.items()
        if not k.startswith(("ansible_connection", "ansible_ssh", "ansible_user", "ansible_python"))
    }
    (path / "group_vars" / "lab.yml").write_text(yaml.safe_dump(lab, sort_keys=False))
    return path


def role_expressions(names: list[str]) -> dict[str, str]:
    """``{name: '{{ name }}'}`` for the role's per-host variables."""
    return {n: "{{ " + n + " }}" for n in names}


def stand_in_plays() -> list[dict[str, Any]]:
    """Plays that stand in for inputs, the queue and staging before playbooks/rollout.yml's plan play (also
    tests/unit/test_rollout_batches_play.py's): every node of sglang_nodes queued, and staging finds something
    to change on each (``fake_pending`` false: nothing), then the role's real plan input."""
    return [
        {
            "name": "Queue the nodes",
            "hosts": "sglang_nodes",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Queue",
                    "ansible.builtin.add_host": {"name": "{{ item }}", "groups": "sglang_rolling_update"},
                    "loop": "{{ groups['sglang_nodes'] }}",
                    "run_once": True,
                    "changed_when": False,
                }
            ],
        },
        {
            "name": "Stand-in staging",
            "hosts": "sglang_rolling_update",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Stand-in for what staging finds",
                    "ansible.builtin.set_fact": {
                        "sglang_rollout_pending": "{{ fake_pending | default(true) }}",
                        "sglang_rollout_resume": {},
                    },
                },
                {
                    "name": "The real plan input",
                    "ansible.builtin.include_role": {
                        "name": "sglang_rollout",
                        "tasks_from": "plan_input.yml",
                    },
                },
            ],
        },
    ]


def plays(tmp: Path) -> dict[str, Path]:
    """The bench's own playbooks (the ones that are not the project's)."""
    rollout = yaml.safe_load((ROOT / "playbooks" / "rollout.yml").read_text())
    # The roles' defaults and variables once for the play (vars_files), then one task on every node that
    # evaluates every role's per-host expressions.
    files = [
        str(ROOT / "roles" / role / kind / "main.yml")
        for role in EXPRESSIONS
        for kind in ("defaults", "vars")
        if (ROOT / "roles" / role / kind / "main.yml").is_file()
    ]
    evaluate = {f"bench_{role}": role_expressions(names) for role, names in EXPRESSIONS.items()}
    books = {
        "fixed": [
            {
                "name": "Fixed",
                "hosts": "localhost",
                "gather_facts": False,
                "tasks": [{"name": "Nothing", "ansible.builtin.set_fact": {"bench": 1}}],
            }
        ],
        "baseline": [
            {
                "name": "Baseline",
                "hosts": "sglang_nodes",
                "gather_facts": False,
                "tasks": [{"name": "Nothing", "ansible.builtin.set_fact": {"bench": 1}}],
            }
        ],
        "plan": [*stand_in_plays(), rollout[1]],
        "expressions": [
            {
                "name": "Expressions",
                "hosts": "sglang_nodes",
                "gather_facts": False,
                "vars_files": files,
                "tasks": [
                    {"name": "Evaluate the roles' per-host expressions", "ansible.builtin.set_fact": evaluate}
                ],
            }
        ],
    }
    out = {}
    for name, book in books.items():
        out[name] = tmp / f"{name}.yml"
        out[name].write_text(yaml.safe_dump(book, sort_keys=False))
    out["inputs"] = ROOT / "playbooks" / "inputs.yml"
    return out


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(book: Path, hosts: Path, name: str, logs: Path) -> dict[str, float]:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "GLM5_LAB_DIR": str(ROOT / "lab"),
    }
    before, started = children_cpu(), time.monotonic()
    with (logs / f"{name}.log").open("w") as log:
        proc = subprocess.run(
            [PLAYBOOK, "-i", str(hosts), str(book)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    seconds, cpu = time.monotonic() - started, children_cpu() - before
    if proc.returncode != 0:
        tail = "\n".join((logs / f"{name}.log").read_text().splitlines()[-30:])
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{tail}")
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,256,1024")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--logs", type=Path, default=ROOT / "build" / "bench" / "logs" / "controller-scale")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    args.logs.mkdir(parents=True, exist_ok=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="glm5-scale-") as tmp:
        books = plays(Path(tmp))
        for nodes in sizes:
            hosts = inventory(Path(tmp) / f"inv-{nodes}", nodes)
            raw = {name: measure(book, hosts, f"{name}-{nodes}", args.logs) for name, book in books.items()}
            fixed, base = raw["fixed"]["cpu_seconds"], raw["baseline"]["cpu_seconds"]
            per_host = {
                "baseline": (base - fixed) / nodes,
                "inputs": (raw["inputs"]["cpu_seconds"] - fixed) / nodes,
                "plan": (raw["plan"]["cpu_seconds"] - fixed) / nodes,
                "expressions": (raw["expressions"]["cpu_seconds"] - base) / nodes,
            }
            runs.append(
                {
                    "nodes": nodes,
                    "runs": raw,
                    "per_host_cpu_ms": {k: round(v * 1000, 2) for k, v in per_host.items()},
                }
            )
            print(
                f"{nodes} hosts: " + ", ".join(f"{k} {v * 1000:.1f} ms/host" for k, v in per_host.items()),
                flush=True,
            )
    first = runs[0]["per_host_cpu_ms"]
    for run in runs[1:]:
        run["ratio_to_first"] = {
            k: round(v / first[k], 2) if first[k] > 0 else None for k, v in run["per_host_cpu_ms"].items()
        }
        print(f"{run['nodes']} / {runs[0]['nodes']} hosts: {run['ratio_to_first']}")
    if args.json:
        args.json.write_text(
            json.dumps({"benchmark": "controller_scale", "sizes": sizes, "runs": runs}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
