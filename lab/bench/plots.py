"""The plots of docs/benchmarks.md, drawn from the figures' records (matplotlib, no display)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    # No timestamp in the PNG, so an unchanged record redraws to the same bytes.
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return str(path)


def _p1(record: Mapping[str, Any], out: Path) -> str:
    runs = sorted(record["runs"], key=lambda r: r["nodes"])
    labels = [f"{r['nodes']} hosts" for r in runs]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    x = range(len(runs))
    ax.bar([i - 0.2 for i in x], [r["deploy"]["seconds"] for r in runs], 0.4, label="site.yml (deploy)")
    ax.bar([i + 0.2 for i in x], [r["noop"]["seconds"] for r in runs], 0.4, label="site.yml again (no-op)")
    for i, r in enumerate(runs):
        ax.annotate(f"changed={r['noop']['totals']['changed']}", (i + 0.2, r["noop"]["seconds"]), ha="center",
                    va="bottom", fontsize=8)  # fmt: skip
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("seconds")
    ax.set_title("P1: site.yml on a converged lab, by lab size")
    ax.legend(fontsize=8)
    return _save(fig, out / "p1-noop.png")


def _p3(record: Mapping[str, Any], out: Path) -> str:
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    runs = [("steady", record["steady"])] + [(r["name"], r) for r in record["rollouts"]]
    names = [name for name, _ in runs]
    x = range(len(runs))
    left.bar([i - 0.2 for i in x], [r["report"]["latency_p50_s"] for _, r in runs], 0.4, label="p50")
    left.bar([i + 0.2 for i in x], [r["report"]["latency_p99_s"] for _, r in runs], 0.4, label="p99")
    left.set_xticks(list(x), names)
    left.set_ylabel("request latency, s")
    left.set_title("P3: latency, steady vs rollouts")
    left.legend(fontsize=8)
    for name, run in runs[1:]:
        timeline = run["report"].get("healthy_timeline") or []
        if timeline:
            times = [t for t, _h, _n in timeline] + [run["report"]["seconds"]]
            healthy = [h for _t, h, _n in timeline] + [timeline[-1][1]]
            right.step(times, healthy, where="post", label=name)
    right.set_xlabel("seconds since the load started")
    right.set_ylabel("healthy workers (router)")
    right.set_title("P3: healthy workers during the rollouts")
    right.set_ylim(bottom=0, top=record["nodes"] + 0.5)
    right.legend(fontsize=8)
    return _save(fig, out / "p3-rollout.png")


def _p4(record: Mapping[str, Any], out: Path) -> str:
    methods = record["methods"]
    order = ["cat", "python", "dd_direct", "verify"]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([methods[m]["label"].split(" (")[0] + f"\n({m})" for m in order],
           [methods[m]["mb_per_s_median"] for m in order])  # fmt: skip
    ax.set_ylabel("MB/s (median of the rounds)")
    ax.set_title(f"P4: verify vs raw read, {record['files']['bytes'] / 1e9:.1f} GB, one run")
    ax.tick_params(axis="x", labelsize=7)
    return _save(fig, out / "p4-verify.png")


def draw(figures: Mapping[str, Mapping[str, Any]], out: Path) -> list[str]:
    """Draw each plot whose figure has a record; the paths written."""
    drawers = {"P1": _p1, "P3": _p3, "P4": _p4}
    return [drawers[key](figures[key], out) for key in sorted(drawers) if key in figures]
