"""Pure helpers of the lab performance suite (lab/bench/suite.py, `make bench`).

Parsing what a run printed (ansible-playbook's PLAY RECAP, the load generator's report), describing the
machine, and rendering docs/benchmarks.md from the figures' JSON records. Nothing here times, runs or asserts
anything about speed; unit tests in tests/unit/test_benchlib.py.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RECAP_LINE = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$")


class BenchError(ValueError):
    """A run whose output cannot be read as a figure."""


def parse_recap(text: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP of an ansible-playbook run: host -> {ok, changed, unreachable, failed, skipped, ...}."""
    if "PLAY RECAP" not in text:
        raise BenchError("the output has no PLAY RECAP (did ansible-playbook run to its end?)")
    recap = text.rsplit("PLAY RECAP", 1)[1]
    hosts: dict[str, dict[str, int]] = {}
    for line in recap.splitlines()[1:]:
        match = RECAP_LINE.match(line.strip())
        if not match:
            if hosts:
                break
            continue
        hosts[match["host"]] = {k: int(v) for k, v in (p.split("=") for p in match["counts"].split())}
    if not hosts:
        raise BenchError("the PLAY RECAP lists no host")
    return hosts


def recap_totals(
    recap: Mapping[str, Mapping[str, int]], exclude: Sequence[str] = ("localhost",)
) -> dict[str, int]:
    """changed, failed and unreachable summed over the hosts, and their count (the control node left out)."""
    hosts = [h for h in recap if h not in exclude]
    return {
        "hosts": len(hosts),
        **{key: sum(recap[h].get(key, 0) for h in hosts) for key in ("changed", "failed", "unreachable")},
    }


def machine() -> dict[str, Any]:
    """CPU model, cores, memory and kernel of this machine (what every figure is measured on)."""
    cpu = platform.processor() or platform.machine()
    memory = None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    return {
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_bytes": memory,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def machine_line(info: Mapping[str, Any]) -> str:
    """One line for a table: '2 cores (AMD EPYC ...), 23.4 GiB, kernel 6.1'."""
    memory = info.get("memory_bytes")
    gib = f"{memory / 2**30:.1f} GiB" if memory else "memory unknown"
    cores = info.get("usable_cores", info.get("cores"))
    return f"{cores} cores ({info.get('cpu_model')}), {gib}, kernel {info.get('kernel')}"


def duration(seconds: float) -> str:
    """'48 s', '3 min 05 s', '1 h 02 min'."""
    whole = round(float(seconds))
    if whole < 60:
        return f"{float(seconds):.1f} s" if seconds < 10 else f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def ratio(numerator: float, denominator: float) -> str:
    """'1.84x' (or 'n/a' when the denominator is 0)."""
    return f"{numerator / denominator:.2f}x" if denominator else "n/a"


def _noop_row(fig: Mapping[str, Any], nodes: int) -> str | None:
    runs = {int(r["nodes"]): r for r in fig.get("runs", [])}
    run = runs.get(nodes)
    if not run:
        return None
    totals = run["noop"]["totals"]
    cpu = run["noop"].get("control_cpu_seconds")
    per_host = f", control node CPU {cpu / totals['hosts']:.1f} s per host" if cpu and totals["hosts"] else ""
    return (
        f"{duration(run['noop']['seconds'])}, changed={totals['changed']} over {totals['hosts']} hosts"
        f"{per_host} (the site.yml run before it: {duration(run['deploy']['seconds'])})"
    )


def fail_stop_row(p6: dict[str, Any]) -> tuple[str, str]:
    """(measured, ratios) of P6 since issue 40: the fail-stop's run beside the guard alone's, same load."""
    f, g = p6["fail_stop"], p6["guard_alone"]
    parts = [
        f"{p6['nodes']} nodes; " if "nodes" in p6 else "",
        f"{f['clients']} clients at {f['rate_per_s']} requests/s through the edge. ",
        f"With the fail-stop: {f['requests']} requests, {f['wrong_answers']} wrong answers, ",
        f"{f['failed_requests']} failed requests",
        f" ({f['router_retries']} attempts the router retried elsewhere)" if "router_retries" in f else "",
        f"; NaN line {f['fault_to_nan_line_s']} s after the fault, ",
        f"out of the router {f['fault_to_router_out_s']} s after it ",
        f"(the guard's removal {f['fault_to_guard_out_s']} s), ",
        f"back in by the guard after {f['fault_to_back_in_s']} s; ",
        f"p99 {f['latency_p99_s']} s, max {f['latency_max_s']} s. ",
        f"The guard alone (fail-stop off, interval {g['guard_interval_s']:.0f} s): ",
        f"{g['requests']} requests, {g['wrong_answers']} wrong answers, ",
        f"{g['failed_requests']} failed requests; out {g['fault_to_guard_out_s']} s after the fault; ",
        f"fewest healthy workers {min(f['min_replicas_in_router'], g['min_replicas_in_router'])}",
    ]
    measured = "".join(parts)
    ratio = (
        g["fault_to_guard_out_s"] / f["fault_to_router_out_s"] if f["fault_to_router_out_s"] else float("inf")
    )
    ratios = (
        f"wrong answers: {f['wrong_answers']} with the fail-stop vs {g['wrong_answers']} with the guard "
        f"alone; fault to out: guard alone / fail-stop {ratio:.0f}x"
    )
    return measured, ratios


def batch_throughput(report: Mapping[str, Any], nodes: int) -> dict[str, Any] | None:
    """Requests answered per second while the router had fewer than ``nodes`` healthy workers (a batch out),
    from a loadgen report's ``healthy_timeline`` ([at, healthy, listed]) and ``completed_per_s``; ``out`` is
    the most replicas out at once. None when no batch was out or the report has no per-second counts."""
    per_second = report.get("completed_per_s")
    timeline = report.get("healthy_timeline") or []
    if not per_second or not timeline:
        return None
    seconds: set[int] = set()
    fewest = nodes
    for i, (at, healthy, _listed) in enumerate(timeline):
        end = timeline[i + 1][0] if i + 1 < len(timeline) else report.get("seconds", at)
        if healthy < nodes:
            seconds.update(range(int(at), max(int(at) + 1, int(end))))
            fewest = min(fewest, healthy)
    seconds = {s for s in seconds if s < len(per_second)}
    if not seconds:
        return None
    return {
        "requests_per_s": sum(per_second[s] for s in seconds) / len(seconds),
        "seconds": len(seconds),
        "out": nodes - fewest,
    }


def rollout_sim_row(p7: Mapping[str, Any]) -> tuple[str, str]:
    """P7's measured and ratio cells: each scenario's batches, hours (hardware; lab), fewest in the router."""
    parts, ratios = [], []
    for s in p7["scenarios"]:
        hw, lab = s["hardware"], s["lab"]
        parts.append(
            f"{s['name']}: {hw['batches_run']} of {hw['batches_planned']} batches, {hw['hours']} h "
            f"(lab phases: {lab['hours'] * 60:.0f} min), fewest in the router {hw['fewest_in_router']} "
            f"(floor {hw['floor']})"
            + (f", restored {', '.join(hw['restored'])}" if hw["restored"] else "")
            + (", stopped by the failure budget" if "failure budget" in hw["stopped"] else "")
        )
    by_name = {s["name"]: s["hardware"] for s in p7["scenarios"]}
    first, tenth = (
        next((v for k, v in by_name.items() if key in k), None) for key in ("defaults", "then 10%")
    )
    if first and tenth:
        ratios.append(f"10% batches / one at a time: {tenth['hours'] / first['hours']:.3f}x the hours")
    ratios.append(
        "fewest in the router / floor: "
        + ", ".join(f"{s['hardware']['fewest_in_router']}/{s['hardware']['floor']}" for s in p7["scenarios"])
    )
    return "; ".join(parts), "; ".join(ratios)


CONTROLLER_COSTS = {
    "inputs": "the inputs play",
    "plan": "the plan play",
    "expressions": "the roles' per-host expressions",
    "baseline": "one trivial task",
}


def controller_scale_row(p8: Mapping[str, Any]) -> tuple[str, str]:
    """P8's measured and ratio cells: CPU ms per host at each size, and each size's ratio to the smallest."""
    runs = p8["runs"]
    measured = "; ".join(
        f"{run['nodes']} hosts: "
        + ", ".join(f"{CONTROLLER_COSTS[k]} {v:.0f} ms" for k, v in run["per_host_cpu_ms"].items())
        for run in runs
    )
    first = runs[0]["nodes"]
    ratios = "; ".join(
        f"{run['nodes']} / {first} hosts: "
        + ", ".join(f"{CONTROLLER_COSTS[k]} {v:.2f}x" for k, v in run["ratio_to_first"].items() if v)
        for run in runs[1:]
    )
    return "controller CPU per host: " + measured, ratios + " (target: at most 1.2x at 1024 against 16)"


def rows(figures: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    """(figure, measured, ratio, date, command) for each figure present, P1..P4, P6, then P5."""
    out: list[tuple[str, str, str, str, str]] = []
    p1 = figures.get("P1")
    if p1:
        runs = {int(r["nodes"]): r for r in p1["runs"]}
        measured = "; ".join(
            f"{n} hosts: {_noop_row(p1, n)}" for n in sorted(runs) if _noop_row(p1, n) is not None
        )
        ratios = ""
        if len(runs) >= 2:
            small, large = sorted(runs)[0], sorted(runs)[-1]
            ratios = (
                f"no-op {large}/{small} hosts: "
                f"{ratio(runs[large]['noop']['seconds'], runs[small]['noop']['seconds'])}; "
                f"no-op/deploy ({small} hosts): "
                f"{ratio(runs[small]['noop']['seconds'], runs[small]['deploy']['seconds'])}"
            )
        out.append(("P1 no-op re-run of site.yml", measured, ratios, p1["date"], p1["command"]))
    p2 = figures.get("P2")
    if p2:
        measured = (
            f"{duration(p2['total_seconds'])}: lab-up {duration(p2['lab_up']['seconds'])}, "
            f"site.yml {duration(p2['site']['seconds'])} (changed={p2['site']['totals']['changed']}, "
            f"failed={p2['site']['totals']['failed']}, {p2['site']['totals']['hosts']} hosts)"
        )
        ratios = f"site.yml is {p2['site']['seconds'] / p2['total_seconds']:.0%} of it"
        noop = {int(r["nodes"]): r["noop"]["seconds"] for r in (p1 or {}).get("runs", [])}.get(
            int(p2["nodes"])
        )
        if noop:
            ratios += (
                f"; site.yml from empty / no-op ({p2['nodes']} nodes): {ratio(p2['site']['seconds'], noop)}"
            )
        out.append(("P2 empty lab hosts to a validated endpoint (caches warm)", measured, ratios, p2["date"],
                    p2["command"]))  # fmt: skip
    p3 = figures.get("P3")
    if p3:
        parts, ratios = [], []
        steady = p3.get("steady", {}).get("report")
        for run in p3["rollouts"]:
            rep = run["report"]
            parts.append(
                f"{run['name']}: {duration(run['seconds'])}, {rep['requests']} requests, "
                f"{rep['failed']} failed, "
                f"p50 {rep['latency_p50_s']:.3f} s, p99 {rep['latency_p99_s']:.3f} s, "
                f"min healthy {rep['min_healthy_workers']}/{p3['nodes']}"
            )
            if steady:
                ratios.append(
                    f"{run['name']}/steady: p50 {ratio(rep['latency_p50_s'], steady['latency_p50_s'])}, "
                    f"p99 {ratio(rep['latency_p99_s'], steady['latency_p99_s'])}"
                )
                batch = batch_throughput(rep, int(p3["nodes"]))
                if batch and steady.get("seconds"):
                    share = batch["requests_per_s"] / (steady["requests"] / steady["seconds"])
                    target = (int(p3["nodes"]) - batch["out"]) / int(p3["nodes"])
                    ratios[-1] += (
                        f", throughput with {batch['out']} of {p3['nodes']} out "
                        f"{share:.2f}x steady (target {target:.2f})"
                    )
        if steady:
            parts.append(
                f"steady (no rollout, {duration(p3['steady']['seconds'])}): {steady['requests']} requests, "
                f"{steady['failed']} failed, p50 {steady['latency_p50_s']:.3f} s, "
                f"p99 {steady['latency_p99_s']:.3f} s"
            )
        if p3.get("concurrency"):
            parts.insert(0, f"{p3['concurrency']} clients at once")
        out.append(("P3 rollout under load", "; ".join(parts), "; ".join(ratios), p3["date"], p3["command"]))
    p4 = figures.get("P4")
    if p4:
        methods = p4["methods"]
        measured = (
            f"{p4['files']['count']} files, {p4['files']['bytes'] / 1e9:.1f} GB: verify "
            f"{methods['verify']['mb_per_s_median']:.0f} MB/s; "
            f"cat {methods['cat']['mb_per_s_median']:.0f} MB/s; "
            f"dd iflag=direct {methods['dd_direct']['mb_per_s_median']:.0f} MB/s; unchanged re-verify "
            f"{p4['unchanged_reverify']['seconds_median'] * 1000:.3f} ms"
        )
        ratios = (
            f"verify/cat {p4['ratios']['verify/cat']:.2f}; verify/dd {p4['ratios']['verify/dd_direct']:.2f}; "
            f"re-verify/verify {p4['unchanged_reverify']['fraction_of_verify']:.1e}"
        )
        if "verify_cores" in methods:  # the verifier on every core against what the machine allows
            cores = p4.get("hash_workers", "every")
            measured = measured.replace(
                "; cat ",
                f"; verify on {cores} cores {methods['verify_cores']['mb_per_s_median']:.0f} MB/s; cat ",
                1,
            ).replace("verify ", "verify on one core ", 1)
            ratios = (
                f"verify on {cores} cores / min(cat, {cores} x one core): "
                f"{p4['ratios']['verify_cores/bound']:.2f} (target 0.8); "
                f"on {cores} cores / one core {p4['ratios']['verify_cores/verify']:.2f}; " + ratios
            )
        out.append(("P4 checkpoint verify vs raw read", measured, ratios, p4["date"], p4["command"]))
    p6 = figures.get("P6")
    if p6 and "fail_stop" in p6:
        out.append(
            (
                "P6 a node whose weights turn NaN while it serves",
                *fail_stop_row(p6),
                p6["date"],
                p6["command"],
            )
        )
    elif p6:
        g = p6["guard"]
        measured = (
            (f"{p6['nodes']} nodes behind the router; " if "nodes" in p6 else "")
            + f"interval {g['interval_s']:.0f} s; first failed verdict to out of the router "
            f"{g['first_failed_verdict_to_out_s']} s; "
            f"poisoned to out {g['poisoned_to_out_s']} s; "
            f"fixed to back in {g['fixed_to_in_s']} s; {g['requests']} requests through the router: "
            f"{g['wrong_answers_before_out']} wrong before it was out, {g['wrong_answers_after_out']} after; "
            f"fewest healthy workers {g['min_replicas_in_router']}; "
            f"guard CPU {g['guard_cpu_s_per_hour']} s per hour"
        )
        ratios = (
            f"fault to out / interval: {g['poisoned_to_out_intervals']:.2f}; "
            f"guard CPU / wall: {g['guard_cpu_s_per_hour'] / 3600:.2%}"
        )
        out.append(("P6 guard: a node answering garbage", measured, ratios, p6["date"], p6["command"]))
    p7 = figures.get("P7")
    if p7:
        out.append(
            ("P7 rolling update of 256 replicas, simulated", *rollout_sim_row(p7), p7["date"], p7["command"])
        )
    p8 = figures.get("P8")
    if p8:
        out.append(
            (
                "P8 controller cost per host as the fleet grows",
                *controller_scale_row(p8),
                p8["date"],
                p8["command"],
            )
        )
    p5 = figures.get("P5")
    if p5:
        out.append(
            (
                "P5 make test wall time",
                f"{duration(p5['seconds'])} (exit {p5['rc']})",
                f"of the 30-minute target: {ratio(p5['seconds'], 1800)}",
                p5["date"],
                p5["command"],
            )
        )
    return out


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


HISTORY = "history.md"


def read_history(records: Path) -> str:
    """The hand-written before-and-after beside the records (docs/benchmarks/history.md), or ""."""
    path = records / HISTORY
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""


def render_markdown(figures: Mapping[str, Mapping[str, Any]], plots: Sequence[str], history: str = "") -> str:
    """docs/benchmarks.md: the figures' table, their machines, where the time went, and the plots."""
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (lab/bench/suite.py) from the records in docs/benchmarks/*.json;",
        "do not edit by hand. Each figure was measured on the lab (podman containers with systemd, real",
        "sglang on the CPU, the real router) on the machine and date in its row. Absolute times depend on",
        "that machine; the ratios are what carries over. Nothing here is a test: no figure is asserted.",
        "",
        "| figure | measured | ratio | date | command |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows(figures):
        lines.append("| " + " | ".join(_cell(c) for c in row[:4]) + f" | `{_cell(row[4])}` |")
    lines += ["", "## Machines", ""]
    seen: dict[str, list[str]] = {}
    for key in sorted(figures):
        info = figures[key].get("machine")
        if info:
            seen.setdefault(machine_line(info), []).append(
                f"{key} (commit {figures[key].get('commit', 'unknown')})"
            )
    for line, keys in seen.items():
        lines.append(f"- {', '.join(keys)}: {line}")
    lines += ["", "A commit marked +changes had uncommitted changes in the tree when it was measured."]
    notes = [(k, figures[k]["notes"]) for k in sorted(figures) if figures[k].get("notes")]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- **{key}**: {note}" for key, note in notes]
    if history:
        lines += ["", "## Where the time went", "", f"From `docs/benchmarks/{HISTORY}`, written by hand.", ""]
        lines += history.splitlines()
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(p).stem}](benchmarks/{Path(p).name})" for p in plots]
    return "\n".join(lines) + "\n"
