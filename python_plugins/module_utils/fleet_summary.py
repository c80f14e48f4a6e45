"""Build the per-host summary that site.yml prints at the end of a run (pure functions)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

COLUMNS = ("host", "gpus", "arch", "driver", "release", "profile", "validated")


def host_row(host: str, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """One row of the summary; a stage that did not run on the host shows as '-'."""
    gpu = hostvars.get("nvidia_gpu") or {}
    names = gpu.get("names") or []
    gpus = f"{gpu['count']}x {names[0]}" if gpu.get("count") and names else "-"
    validation = hostvars.get("sglang_validation")
    validated = "-" if validation is None else ("passed" if validation.get("passed") else "FAILED")
    return {
        "host": host,
        "gpus": gpus,
        "arch": str(gpu.get("arch") or "-"),
        "driver": str(gpu.get("driver_version") or "-"),
        "release": str(hostvars.get("sglang_release_name") or "-"),
        "profile": str(hostvars.get("sglang_profile_name") or "-"),
        "validated": validated,
    }


def format_table(rows: Iterable[Mapping[str, str]], columns: tuple[str, ...] = COLUMNS) -> list[str]:
    """Render rows as aligned text lines, header first."""
    rows = list(rows)
    widths = {c: max([len(c), *(len(r.get(c, "")) for r in rows)]) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    lines += ["  ".join(r.get(c, "").ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return lines


def fleet_summary(hosts: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The summary table for the given hosts, in inventory order."""
    return format_table(host_row(h, hostvars[h]) for h in hosts)
