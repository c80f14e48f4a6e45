"""The alerting rules of sglang_monitoring, rendered from their template the way the role renders them:
every alert links its runbook (an anchor that exists in docs/runbooks.md), has unit tests that show it firing
and not firing, and follows the role's variables (thresholds, runbook base URL, extra labels). promtool checks
and tests the rendering when Debian's promtool is in the cache (make lint runs the same with
lab/bin/promtool)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller_play import ROOT, ansible_playbook

ROLE = ROOT / "roles" / "sglang_monitoring"
RENDER = ROLE / "tests" / "render-rules.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
BASE = DEFAULTS["sglang_monitoring_runbook_base_url"]


def render(out: Path, **overrides: Any) -> Path:
    """Render glm5-rules.yml (with its unit tests beside it) into ``out``, overriding role variables."""
    extra = {"sglang_monitoring_rules_out": str(out), **overrides}
    done = ansible_playbook(str(RENDER), "-e", json.dumps(extra))
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "glm5-rules.yml"


def alerts(rules_file: Path) -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def promtool() -> str | None:
    """Debian's promtool as lab/bin/promtool caches it; None when it is not there (no download in a test)."""
    cache = Path(os.environ.get("GLM5_CACHE", Path.home() / ".cache" / "glm5-deploy")) / "prometheus"
    found = sorted(cache.glob("*/usr/bin/promtool"))
    return str(found[-1]) if found else None


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens."""
    anchors = set()
    for line in markdown.splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            text = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


@pytest.fixture(scope="module")
def default_rules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return render(tmp_path_factory.mktemp("rules"))


def test_every_alert_links_its_runbook_section(default_rules: Path) -> None:
    anchors = github_anchors(RUNBOOKS.read_text())
    found = alerts(default_rules)
    assert len(found) >= 20, sorted(found)
    for name, rule in found.items():
        url = rule["annotations"].get("runbook_url")
        assert url == f"{BASE}#{name.lower()}", (name, url)
        assert url.split("#", 1)[1] in anchors, f"docs/runbooks.md has no section for {name}"
    # And no runbook section names an alert that does not exist.
    sections = set(re.findall(r"^## (GLM5\w+)$", RUNBOOKS.read_text(), re.M))
    assert sections == set(found), sections ^ set(found)


def test_every_runbook_section_says_what_it_means_what_to_check_and_how_to_fix() -> None:
    text = RUNBOOKS.read_text()
    sections = re.split(r"^## (?=GLM5)", text, flags=re.M)[1:]
    assert sections
    for section in sections:
        name = section.split("\n", 1)[0]
        for part in ("**What it means.**", "**First checks.**", "**How to fix.**"):
            assert part in section, f"{name}: no {part}"


def test_every_alert_has_a_severity_a_summary_and_a_description(default_rules: Path) -> None:
    for name, rule in alerts(default_rules).items():
        assert rule["labels"] == {"severity": rule["labels"]["severity"]}, name
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        assert rule["annotations"]["summary"] and len(rule["annotations"]["description"]) > 100, name


def test_every_alert_is_tested_firing_and_not_firing(default_rules: Path) -> None:
    tests = yaml.safe_load((ROLE / "tests" / "glm5-rules.test.yml").read_text())["tests"]
    checks = [check for test in tests for check in test["alert_rule_test"]]
    firing = {c["alertname"] for c in checks if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in checks if not c.get("exp_alerts")}
    names = set(alerts(default_rules))
    assert names - firing == set(), "never shown firing"
    assert names - quiet == set(), "never shown not firing"


def test_the_thresholds_labels_and_runbook_base_are_the_roles_variables(tmp_path: Path) -> None:
    overrides = {
        "sglang_monitoring_runbook_base_url": "https://wiki.example.internal/glm5/runbooks",
        "sglang_monitoring_alert_labels": {"team": "ml-serving"},
        "sglang_monitoring_router_error_ratio": 0.1,
        "sglang_monitoring_guard_stale_seconds": 600,
        "sglang_monitoring_ttft_p95_seconds": 7.5,
        "sglang_monitoring_itl_p95_seconds": 0.15,
        "sglang_monitoring_queue_requests_max": 64,
        "sglang_monitoring_kv_cache_usage_max": 0.9,
        "sglang_monitoring_retractions_per_minute": 5,
        "sglang_monitoring_gpu_temp_max": 80,
        "sglang_monitoring_gpu_memory_temp_max": 90,
        "sglang_monitoring_gpu_fatal_xids": [79, 48],
    }
    found = alerts(render(tmp_path, **overrides))
    for name, rule in found.items():
        assert rule["labels"] == {"team": "ml-serving", "severity": rule["labels"]["severity"]}, name
        assert (
            rule["annotations"]["runbook_url"]
            == f"https://wiki.example.internal/glm5/runbooks#{name.lower()}"
        )

    def expr(name: str) -> str:
        return " ".join(found[name]["expr"].split())

    assert expr("GLM5RouterErrorRateRising").count("> 0.1") == 1
    assert "more than 10% of" in found["GLM5RouterErrorRateRising"]["annotations"]["description"]
    assert expr("GLM5GuardStale").endswith("> 600")
    assert expr("GLM5TimeToFirstTokenHigh").endswith("> 7.5")
    assert expr("GLM5InterTokenLatencyHigh").endswith("> 0.15")
    assert expr("GLM5RequestQueueBacklog").endswith("> 64")
    assert expr("GLM5KVCacheNearlyFull").endswith("> 0.9")
    assert expr("GLM5KVCacheRetracting").endswith("> 5")
    assert expr("GLM5GPUTemperatureHigh") == "DCGM_FI_DEV_GPU_TEMP > 80"
    assert expr("GLM5GPUMemoryTemperatureHigh") == "DCGM_FI_DEV_MEMORY_TEMP > 90"
    assert expr("GLM5GPUFatalXid") == "DCGM_FI_DEV_XID_ERRORS == 79 or DCGM_FI_DEV_XID_ERRORS == 48"
    tool = promtool()
    if tool:
        checked = subprocess.run(
            [tool, "check", "rules", str(tmp_path / "glm5-rules.yml")], capture_output=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_no_fatal_xid_leaves_a_valid_rule_that_never_fires(tmp_path: Path) -> None:
    found = alerts(render(tmp_path, sglang_monitoring_gpu_fatal_xids=[]))
    assert found["GLM5GPUFatalXid"]["expr"].strip() == "DCGM_FI_DEV_XID_ERRORS < 0"


def test_promtool_checks_the_default_rendering_and_runs_its_unit_tests(default_rules: Path) -> None:
    tool = promtool()
    if not tool:
        pytest.skip("Debian's promtool is not in the cache (lab/bin/promtool --print-path fetches it)")
    checked = subprocess.run([tool, "check", "rules", str(default_rules)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run(
        [tool, "test", "rules", str(default_rules.parent / "glm5-rules.test.yml")],
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
