"""The Grafana dashboard of sglang_monitoring (files/dashboards/glm5-fleet.json), and the alert rules, query
only metrics that the fleet exports: sglang, smg (the router), the guard, and NVIDIA's dcgm-exporter. The
names are listed here by source, each group with where it was read; a panel that names anything else (a typo,
a metric a release renamed) fails."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_monitoring_rules import ROLE, alerts, promtool, render

DASHBOARD = ROLE / "files" / "dashboards" / "glm5-fleet.json"
GUARD = ROLE.parent / "sglang_guard" / "files" / "guard_metrics.py"

# sglang 0.5.23 with --enable-metrics: sglang/srt/observability/metrics_collector.py (prometheus_client: a
# Counter named x_total is exposed as x_total; a Histogram as x_bucket, x_sum and x_count).
SGLANG = {
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:gen_throughput",
    "sglang:cache_hit_rate",
    "sglang:token_usage",
    "sglang:num_retracted_requests_total",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "sglang:num_requests_total",
    "sglang:num_aborted_requests_total",
    "sglang:time_to_first_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:e2e_request_latency_seconds",
    "sglang:queue_time_seconds",
}
# smg 1.13 (the router): docs/reference/metrics.md of lightseekorg/smg, each name checked in the 1.13.0
# wheel's smg_rs library; docs/sources/router-and-mirror.md.
SMG = {
    "smg_http_requests_total",
    "smg_http_request_duration_seconds",
    "smg_http_responses_total",
    "smg_worker_pool_size",
    "smg_worker_requests_active",
    "smg_worker_health",
    "smg_worker_cb_state",
    "smg_worker_retries_total",
    "smg_worker_retries_exhausted_total",
}
# The guard: roles/sglang_guard/files/guard_metrics.py, class Metrics (its counters get _total).
GUARD_METRICS = {
    "glm5_guard_verdict",
    "glm5_guard_symptom_info",
    "glm5_guard_last_check_timestamp_seconds",
    "glm5_guard_in_router",
    "glm5_guard_held",
    "glm5_guard_removed",
    "glm5_guard_transitions_total",
    "glm5_guard_consecutive_failures",
    "glm5_guard_alerts_total",
    "glm5_guard_kept_in",
    "glm5_guard_removal_cap",
    "glm5_guard_healthy_replicas",
    "glm5_guard_router_up",
    "glm5_guard_cycle_seconds",
    "glm5_guard_last_cycle_timestamp_seconds",
}
# NVIDIA dcgm-exporter: etc/default-counters.csv (enabled by default), etc/dcp-metrics-included.csv (the
# profiling counters), and the fields its CSVs list commented out, which an operator enables: the double-bit
# ECC counter and the clocks' event reasons (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before DCGM 3.3).
DCGM = {
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
}
KNOWN = SGLANG | SMG | GUARD_METRICS | DCGM
# Prometheus's own series per target: the rules' down alerts read it, the dashboard does not.
PROMETHEUS = {"up"}

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
KEYWORDS |= {"and", "or", "unless", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: bare names, and __name__ matchers' alternatives.
    Histogram series (x_bucket, x_sum, x_count) count as their histogram x when x is a known histogram."""
    text = re.sub(r"\$\{?\w+\}?", "", expr)  # Grafana's variables ($__rate_interval, ${host})
    names: set[str] = set()
    for matcher in re.findall(r'__name__\s*=~?\s*"([^"]*)"', text):
        names |= set(matcher.split("|"))
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    for match in re.finditer(r"(?<![\w:.])([A-Za-z_:][\w:]*)\s*(\()?", text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return {_histogram(name) for name in names}


def _histogram(name: str) -> str:
    for suffix in HISTOGRAM_SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and base in KNOWN:
            return base
    return name


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in model["panels"]:
        found.append(panel)
        found += panel.get("panels", [])  # a collapsed row holds its panels
    return found


def variable_expr(query: str) -> str:
    """The PromQL of a query variable: label_values(SELECTOR, label) selects SELECTOR."""
    found = re.fullmatch(r"label_values\((.*),\s*\w+\)", query.strip())
    return found.group(1) if found else query


def queries(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every panel target and every query variable."""
    out = [(p["title"], t["expr"]) for p in panels(model) for t in p.get("targets", [])]
    for variable in model.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            query = query["query"] if isinstance(query, dict) else query
            out.append((f"variable {variable['name']}", variable_expr(query)))
    return out


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (host, le) (rate(sglang:time_to_first_token_seconds_bucket{job="x"}[5m]))',
            {"sglang:time_to_first_token_seconds"},
        ),
        ("count(glm5_guard_in_router == 0) or vector(0)", {"glm5_guard_in_router"}),
        ('a / ignoring(worker) group_left sum(b{c="d|e"}) > bool 1', {"a", "b"}),
        ('{__name__=~"X_A|X_B"} and floor({__name__=~"X_A|X_B"} / 8) % 2 == 1', {"X_A", "X_B"}),
        ("time() - last_seen_seconds > 300", {"last_seen_seconds"}),
        ("rate(x_total[$__rate_interval]) * 60", {"x_total"}),
    ],
)
def test_metric_names_finds_the_selected_metrics(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_guards_metrics_are_the_ones_its_daemon_exports() -> None:
    source = GUARD.read_text()
    gauges = set(re.findall(r'gauge\(\s*"(glm5_guard_\w+)"', source))
    counters = {f"{name}_total" for name in re.findall(r'counter\(\s*"(glm5_guard_\w+)"', source)}
    assert gauges | counters == GUARD_METRICS


def test_every_dashboard_query_names_only_metrics_the_fleet_exports() -> None:
    model = dashboard()
    found = queries(model)
    assert len(found) > 30
    for where, expr in found:
        unknown = metric_names(expr) - KNOWN
        assert not unknown, f"{where}: {expr!r} names {sorted(unknown)}"
        assert metric_names(expr), f"{where}: {expr!r} names no metric"
    used = set().union(*(metric_names(expr) for _, expr in found))
    for source, group in (("sglang", SGLANG), ("smg", SMG), ("the guard", GUARD_METRICS), ("DCGM", DCGM)):
        assert used & group, f"no panel shows a metric of {source}"


def test_every_panel_reads_the_dashboards_prometheus_variable() -> None:
    model = dashboard()
    assert model["uid"] == "glm5-fleet" and model["title"]
    ids = [p["id"] for p in panels(model)]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    for panel in panels(model):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"], panel["title"]


def test_the_rules_name_only_metrics_the_fleet_exports(tmp_path: Path) -> None:
    for name, rule in alerts(render(tmp_path)).items():
        unknown = metric_names(rule["expr"]) - KNOWN - PROMETHEUS
        assert not unknown, f"{name} names {sorted(unknown)}"


def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    """Each query as a recording rule (Grafana's variables replaced by what they stand for), for promtool."""
    tool = promtool()
    if not tool:
        pytest.skip("Debian's promtool is not in the cache (lab/bin/promtool --print-path fetches it)")
    rules = []
    for number, (_, expr) in enumerate(queries(dashboard())):
        expr = expr.replace("$__rate_interval", "5m").replace("$host", ".*")
        rules.append({"record": f"glm5:dashboard_query_{number}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
