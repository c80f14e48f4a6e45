#!/usr/bin/env python3
"""The lab performance suite (`make bench`): measure P1-P5 on the lab and regenerate docs/benchmarks.md.

    python lab/bench/suite.py [--figures P1,P2,P3,P4,P5] [--sizes 3,6] [--render-only]

Figures (each writes docs/benchmarks/<figure>.json; a figure not run keeps its last record and date):
  P2  empty lab hosts to a validated endpoint, caches warm: lab-down, then lab-up and site.yml, timed apart.
  P1  a no-op re-run of site.yml at each lab size (--sizes, the lab's size is LAB_NODES): deploy, then the
      timed re-run and its changed count. The lab goes back to the first size afterwards.
  P3  rollouts under load: the load generator (lab/bin/loadgen) on lab-gateway, first for a steady minute
      with no rollout, then around playbooks/rolling_update.yml rolling molecule/rolling's update out and
      back: requests, failures, p50/p99, the fewest healthy workers.
  P4  checkpoint verify against a raw sequential read of the same 4 GiB of shards, in one run, and an
      unchanged re-verify (lab/bin/bench-checkpoint-verify).
  P5  `make test`, timed (about 50 minutes).
  P7  a rolling update of 256 replicas, simulated over the real planner (lab/bench/rollout_sim.py): batches,
      hours with hardware and with lab phase durations, the fewest replicas in the router against the floor,
      the failure budget at work. No lab: seconds.
  P8  controller cost per host as the fleet grows (lab/bench/controller_scale.py): the inputs play, the plan
      play and the roles' per-host expressions over 16, 256 and 1024 fake hosts, and their ratio to 16. No
      lab: controller-only plays.
  P6  a node whose weights turn NaN while it serves (tests/integration/test_serving_safety.py: swapped to the
      NaN copy by hand under 4 clients): with the fail-stop (make test's test) and with the guard alone (the
      bench-only test, fail-stop off), side by side: wrong answers, failed requests, time to out.
Run from the project root through make (the Makefile exports PATH, CONTAINERS_CONF and ANSIBLE_CONFIG).
The logs of every command go to build/bench/logs/. Benchmarks, not tests: nothing is asserted about time;
a command that fails stops the suite, because its time would not be the figure's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import yaml  # noqa: E402

DOCS = ROOT / "docs"
RECORDS = DOCS / "benchmarks"
LOGS = ROOT / "build" / "bench" / "logs"
# The order they run in: P2 starts from an empty lab.
FIGURES = ("P7", "P8", "P2", "P1", "P3", "P4", "P6", "P5")


def say(message: str) -> None:
    print(f"[bench {dt.datetime.now(dt.UTC):%H:%M:%S}] {message}", flush=True)


LAST_CPU = [0.0]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(name: str, argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Run a command, output to build/bench/logs/<name>.log: (seconds, output). A failure stops the suite.
    The control node's CPU seconds of the run (it and its children: ssh, podman) go to LAST_CPU."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    say(f"{name}: {' '.join(argv)} (log: {log.relative_to(ROOT)})")
    started = time.monotonic()
    cpu_before = _children_cpu()
    with log.open("w", encoding="utf-8") as handle:
        proc = subprocess.run(
            argv,
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            check=False,
        )
    seconds = time.monotonic() - started
    LAST_CPU[0] = _children_cpu() - cpu_before
    output = log.read_text(encoding="utf-8", errors="replace")
    say(f"{name}: exit {proc.returncode} after {benchlib.duration(seconds)}")
    if proc.returncode != 0:
        tail = "\n".join(output.splitlines()[-40:])
        raise SystemExit(f"bench: {name} failed (exit {proc.returncode}); the log's end:\n{tail}")
    return seconds, output


def inventory(nodes: int) -> str:
    return subprocess.run(
        [str(ROOT / "lab" / "bin" / "lab-inventory"), str(nodes)], check=True, capture_output=True, text=True
    ).stdout.strip()


def playbook(name: str, nodes: int, *args: str) -> tuple[float, dict[str, Any]]:
    """ansible-playbook against the lab of this size: (seconds, {recap, totals})."""
    seconds, output = run(name, ["ansible-playbook", "-i", inventory(nodes), *args])
    recap = benchlib.parse_recap(output)
    return seconds, {
        "seconds": round(seconds, 1),
        "control_cpu_seconds": round(LAST_CPU[0], 1),
        "recap": recap,
        "totals": benchlib.recap_totals(recap),
    }


def make(name: str, target: str, nodes: int) -> float:
    seconds, _ = run(name, ["make", "--no-print-directory", target, f"LAB_NODES={nodes}"])
    return seconds


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout
    return out.stdout.strip() + ("+changes" if dirty.strip() else "") if out.returncode == 0 else "unknown"


def stamp(command: str) -> dict[str, Any]:
    return {
        "date": f"{dt.datetime.now(dt.UTC):%Y-%m-%d}",
        "command": command,
        "machine": benchlib.machine(),
        "commit": commit(),
    }


def p2(sizes: list[int]) -> dict[str, Any]:
    nodes = sizes[0]
    make("p2-lab-down", "lab-down", nodes)
    lab_up = make("p2-lab-up", "lab-up", nodes)
    _, site = playbook("p2-site", nodes, "site.yml")
    return {
        **stamp(f"make lab-down; make lab-up LAB_NODES={nodes}; ansible-playbook site.yml"),
        "nodes": nodes,
        "lab_up": {"seconds": round(lab_up, 1)},
        "site": site,
        "total_seconds": round(lab_up + site["seconds"], 1),
    }


def p1(sizes: list[int]) -> dict[str, Any]:
    runs = []
    for nodes in sizes:
        make(f"p1-lab-up-{nodes}", "lab-up", nodes)
        _, deploy = playbook(f"p1-deploy-{nodes}", nodes, "site.yml")
        _, noop = playbook(f"p1-noop-{nodes}", nodes, "site.yml")
        runs.append({"nodes": nodes, "deploy": deploy, "noop": noop})
    if len(sizes) > 1:  # back to the first size: lab-up removes the extra hosts, site.yml prunes the router
        make("p1-lab-restore", "lab-up", sizes[0])
        playbook("p1-site-restore", sizes[0], "site.yml")
    return {
        **stamp(
            f"make lab-up LAB_NODES=N; ansible-playbook site.yml (deploy), then again (timed), N in {sizes}"
        ),
        "runs": runs,
    }


def _loadgen(name: str, nodes: int, middle: list[str], extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="glm5-bench-") as tmp:
        dest = Path(tmp) / "loadgen.json"
        seconds, _ = playbook(
            name,
            nodes,
            *middle,
            "-e",
            f"lab_loadgen_report_dest={dest}",
            "-e",
            "lab_loadgen_assert=false",
            *extra,
        )
        return {
            "name": name,
            "seconds": round(seconds, 1),
            "report": json.loads(dest.read_text(encoding="utf-8")),
        }


# Clients at once in P3: enough to keep every lab replica busy (the lab engine serves a few at a time).
P3_CONCURRENCY = 8


def lab_nodes() -> int:
    """The committed lab's size (inventory/lab): the figures that run its tests or its playbooks use it."""
    hosts = yaml.safe_load((ROOT / "inventory" / "lab" / "hosts.yml").read_text(encoding="utf-8"))
    return len(hosts["all"]["children"]["sglang_nodes"]["hosts"])


def p3(_sizes: list[int]) -> dict[str, Any]:
    # The lab it needs: the committed inventory's size, converged (P1 and P2 may have left another size).
    nodes = lab_nodes()
    make("p3-lab-up", "lab-up", nodes)
    playbook("p3-site", nodes, "site.yml")
    clients = ["-e", f"lab_loadgen_concurrency={P3_CONCURRENCY}"]
    steady = _loadgen("p3-steady", nodes, ["lab/playbooks/bench-steady.yml"], clients)
    update = ["-e", "@molecule/rolling/vars/update.yml", *clients]
    out = _loadgen("p3-rollout-update", nodes, ["lab/playbooks/bench-rollout.yml"], update)
    back = _loadgen("p3-rollout-back", nodes, ["lab/playbooks/bench-rollout.yml"], clients)
    out["name"], back["name"] = "update", "back"
    return {
        **stamp(
            "ansible-playbook lab/playbooks/bench-rollout.yml [-e @molecule/rolling/vars/update.yml] "
            f"-e lab_loadgen_concurrency={P3_CONCURRENCY} (loadgen on lab-gateway around "
            "playbooks/rolling_update.yml; the lab brought to inventory/lab's size and converged first)"
        ),
        "concurrency": P3_CONCURRENCY,
        "nodes": nodes,
        "steady": steady,
        "rollouts": [out, back],
    }


def p4(_sizes: list[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="glm5-bench-") as tmp:
        dest = Path(tmp) / "p4.json"
        argv = ["lab/bin/bench-checkpoint-verify", "--make-files", "4", "--rounds", "5"]
        run("p4-checkpoint-verify", [sys.executable, *argv, "--json", str(dest)])
        record = json.loads(dest.read_text(encoding="utf-8"))
    return {**record, **stamp(" ".join(argv)), "date_utc": record["date_utc"]}


def p7(_sizes: list[int]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="glm5-bench-") as tmp:
        dest = Path(tmp) / "p7.json"
        run("p7-rollout-sim", [sys.executable, "lab/bench/rollout_sim.py", "--json", str(dest)])
        record = json.loads(dest.read_text(encoding="utf-8"))
    return {**record, **stamp("python lab/bench/rollout_sim.py")}


def p8(_sizes: list[int]) -> dict[str, Any]:
    command = [sys.executable, "lab/bench/controller_scale.py", "--sizes", "16,256,1024"]
    with tempfile.TemporaryDirectory(prefix="glm5-bench-") as tmp:
        dest = Path(tmp) / "p8.json"
        run("p8-controller-scale", [*command, "--json", str(dest)])
        record = json.loads(dest.read_text(encoding="utf-8"))
    return {**record, **stamp("python lab/bench/controller_scale.py --sizes 16,256,1024")}


def p5(_sizes: list[int]) -> dict[str, Any]:
    seconds, _ = run("p5-make-test", ["make", "--no-print-directory", "test"])
    return {**stamp("make test"), "seconds": round(seconds, 1), "rc": 0}


def p6(_sizes: list[int]) -> dict[str, Any]:
    # The guard's test runs on the committed lab (inventory/lab): bring the lab to that size and converge it
    # first (P1 and P3 may have left it at another size).
    nodes = lab_nodes()
    make("p6-lab-up", "lab-up", nodes)
    playbook("p6-site", nodes, "site.yml")
    # The same scenario twice, under the same load: the fail-stop (make test's test), then the guard alone
    # (the bench-only test serves the node with sglang_nan_fail_stop_off, and serves it as before afterwards).
    records = {}
    for key, selector in (
        ("fail_stop", ["-k", "weights_turn_nan"]),
        ("guard_alone", ["-m", "bench", "-k", "guard_alone"]),
    ):
        numbers = ROOT / ".ansible" / f"{key.replace('_', '-')}-numbers.json"
        numbers.unlink(missing_ok=True)
        argv = ["-m", "pytest", "tests/integration/test_serving_safety.py", "-q", *selector]
        run(f"p6-{key}", [sys.executable, *argv])
        records[key] = json.loads(numbers.read_text(encoding="utf-8"))
    command = (
        "python -m pytest tests/integration/test_serving_safety.py -q -k 'weights_turn_nan or guard_alone'"
    )
    return {**stamp(command), "nodes": nodes, **records}


def plots(figures: dict[str, dict[str, Any]]) -> list[str]:
    import plots as plotting  # matplotlib: imported only when drawing

    return plotting.draw(figures, RECORDS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--figures", default=",".join(sorted(FIGURES)), help="which figures to measure")
    parser.add_argument("--sizes", default="3,6", help="lab sizes (GPU nodes) for P1; the first is the lab's")
    parser.add_argument(
        "--render-only", action="store_true", help="only rewrite docs/benchmarks.md and plots"
    )
    args = parser.parse_args()
    wanted = [f.strip().upper() for f in args.figures.split(",") if f.strip()]
    unknown = sorted(set(wanted) - set(FIGURES))
    if unknown:
        parser.error(f"unknown figures {unknown}; known: {', '.join(sorted(FIGURES))}")
    sizes = [int(s) for s in args.sizes.split(",")]
    RECORDS.mkdir(parents=True, exist_ok=True)
    measure = {"P1": p1, "P2": p2, "P3": p3, "P4": p4, "P5": p5, "P6": p6, "P7": p7, "P8": p8}
    if not args.render_only:
        for figure in (f for f in FIGURES if f in wanted):
            say(f"{figure}: measuring")
            record = measure[figure](sizes)
            (RECORDS / f"{figure}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
            say(f"{figure}: recorded in docs/benchmarks/{figure}.json")
    figures = {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(RECORDS.glob("P*.json"))}
    drawn = plots(figures)
    page = benchlib.render_markdown(figures, drawn, benchlib.read_history(RECORDS))
    (DOCS / "benchmarks.md").write_text(page, encoding="utf-8")
    say(f"wrote docs/benchmarks.md ({len(figures)} figures, {len(drawn)} plots)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
