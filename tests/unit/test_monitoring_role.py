"""playbooks/monitoring.yml (role sglang_monitoring) on this machine, into a temporary directory: the files a
Prometheus 2.42 reads without a hand edit (file_sd target lists, the jobs that read them, the rules), the
Grafana dashboard and its provider; a second run changes nothing, check mode writes nothing and predicts the
run, and an inventory change rewrites only a target list. The lab's Prometheus loading them is an integration
test (tests/integration)."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from controller_play import ROOT, ansible_playbook
from test_monitoring_rules import promtool

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role writes root-owned files (owner: root)")

DASHBOARD = ROOT / "roles" / "sglang_monitoring" / "files" / "dashboards" / "glm5-fleet.json"


def inventory(tmp_path: Path, nodes: int = 2) -> Path:
    hosts = {f"gpu-node-{n}": {"ansible_host": f"10.0.0.{10 + n}"} for n in range(1, nodes + 1)}
    hosts["gpu-node-2"]["sglang_server_tls_certificate"] = "a certificate"
    path = tmp_path / "hosts.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "prometheus": {
                            "hosts": {
                                "monitor": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": sys.executable,
                                }
                            }
                        },
                        "sglang_nodes": {"hosts": hosts},
                        "sglang_router": {"hosts": {"gw": {"ansible_host": "10.0.0.10"}}},
                    }
                }
            }
        )
    )
    return path


def settings(out: Path, **more: Any) -> dict[str, Any]:
    tool = promtool()
    return {
        "sglang_monitoring_dir": str(out / "glm5"),
        "sglang_monitoring_validate": bool(tool),
        "sglang_monitoring_promtool": tool or "promtool",
        "sglang_monitoring_manage_config": True,
        "sglang_monitoring_prometheus_config": str(out / "prometheus.yml"),
        "sglang_monitoring_reload": False,
        "sglang_monitoring_grafana_dashboards_dir": str(out / "dashboards"),
        "sglang_monitoring_grafana_provisioning_dir": str(out / "provisioning"),
        **more,
    }


def play(hosts: Path, extra: dict[str, Any], *args: str) -> int:
    """Run the playbook; the number of tasks it changed on the Prometheus host."""
    done = ansible_playbook("-i", str(hosts), "playbooks/monitoring.yml", "-e", json.dumps(extra), *args)
    assert done.returncode == 0, done.stdout + done.stderr
    recap = re.search(r"^monitor\s+:.*changed=(\d+)", done.stdout, re.M)
    assert recap, done.stdout
    return int(recap.group(1))


def files(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*")) if p.is_file()}


def test_the_role_writes_what_prometheus_and_grafana_read_idempotently_and_in_check_mode(
    tmp_path: Path,
) -> None:
    hosts, out = inventory(tmp_path), tmp_path / "out"
    extra = settings(out)

    assert play(hosts, extra, "--check") > 0
    assert not out.exists(), files(out)

    assert play(hosts, extra) > 0
    written = files(out)
    assert set(written) == {
        "glm5/glm5-rules.yml",
        "glm5/glm5-scrape.yml",
        "glm5/targets/glm5-sglang.json",
        "glm5/targets/glm5-router.json",
        "glm5/targets/glm5-guard.json",
        "prometheus.yml",
        "dashboards/glm5-fleet.json",
        "provisioning/glm5-deploy.yml",
    }
    assert play(hosts, extra) == 0
    assert play(hosts, extra, "--check") == 0
    assert files(out) == written

    # The target lists: one group per host, with its inventory name; an https node carries its scheme.
    targets = {
        job: json.loads(written[f"glm5/targets/{job}.json"])
        for job in ("glm5-sglang", "glm5-router", "glm5-guard")
    }
    assert targets["glm5-sglang"] == [
        {"targets": ["10.0.0.11:30000"], "labels": {"host": "gpu-node-1"}},
        {"targets": ["10.0.0.12:30000"], "labels": {"host": "gpu-node-2", "__scheme__": "https"}},
    ]
    assert targets["glm5-router"] == [{"targets": ["10.0.0.10:29000"], "labels": {"host": "gw"}}]
    assert targets["glm5-guard"] == [{"targets": ["10.0.0.10:29100"], "labels": {"host": "gw"}}]

    # The jobs (scrape_config_files format) read those files; the managed configuration holds the same jobs.
    jobs = yaml.safe_load(written["glm5/glm5-scrape.yml"])["scrape_configs"]
    assert [job["job_name"] for job in jobs] == ["glm5-sglang", "glm5-router", "glm5-guard"]
    for job in jobs:
        assert job["file_sd_configs"] == [
            {"files": [str(out / "glm5" / "targets" / f"{job['job_name']}.json")]}
        ]
        assert "static_configs" not in job
    managed = yaml.safe_load(written["prometheus.yml"])
    assert managed["scrape_configs"] == jobs
    assert managed["rule_files"] == [str(out / "glm5" / "glm5-rules.yml")]

    # Grafana: the dashboard as shipped, and a provider that reads its directory.
    assert written["dashboards/glm5-fleet.json"] == DASHBOARD.read_text()
    provider = yaml.safe_load(written["provisioning/glm5-deploy.yml"])
    assert provider["apiVersion"] == 1
    assert provider["providers"][0]["options"]["path"] == str(out / "dashboards")

    # A new node rewrites its target lists only: the jobs, and so the configuration, stay as they are.
    assert play(inventory(tmp_path, nodes=3), extra) == 1
    after = files(out)
    assert {name for name in after if after[name] != written[name]} == {"glm5/targets/glm5-sglang.json"}
    assert "gpu-node-3" in after["glm5/targets/glm5-sglang.json"]

    # The dcgm-exporter job comes with its target list, and goes with it.
    with_dcgm = {**extra, "sglang_monitoring_scrape_dcgm": True}
    assert play(inventory(tmp_path, nodes=3), with_dcgm) == 3  # its target list, the jobs, the configuration
    dcgm = json.loads((out / "glm5" / "targets" / "glm5-dcgm.json").read_text())
    assert [group["targets"] for group in dcgm] == [
        ["10.0.0.11:9400"],
        ["10.0.0.12:9400"],
        ["10.0.0.13:9400"],
    ]
    jobs = yaml.safe_load((out / "glm5" / "glm5-scrape.yml").read_text())["scrape_configs"]
    assert jobs[-1]["job_name"] == "glm5-dcgm"
    assert play(inventory(tmp_path, nodes=3), extra) == 3
    assert not (out / "glm5" / "targets" / "glm5-dcgm.json").exists()
    assert files(out)["glm5/glm5-scrape.yml"] == written["glm5/glm5-scrape.yml"]
