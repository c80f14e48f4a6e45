"""The scrape jobs' target lists (module_utils/monitoring_targets.py, filter sglang_monitoring_targets)."""

from __future__ import annotations

from ansible_collections.glm5.deploy.plugins.module_utils.monitoring_targets import scrape_targets

HOSTVARS = {
    "gpu-1": {"ansible_host": "10.0.0.1"},
    "gpu-2": {
        "ansible_host": "10.0.0.2",
        "sglang_server_advertise_host": "gpu-2.fabric",
        "sglang_server_port": 31000,
        "sglang_server_tls_certificate": "-----BEGIN CERTIFICATE-----",
    },
    "gpu-3": {},
    "router": {"ansible_host": "10.0.1.1", "sglang_guard_metrics_port": 29200},
}


def test_each_node_at_the_address_and_port_the_router_reaches_it_at() -> None:
    jobs = scrape_targets(HOSTVARS, ["gpu-1", "gpu-2", "gpu-3"], ["router"])
    assert jobs["glm5-sglang"] == [
        {"targets": ["10.0.0.1:30000"], "labels": {"host": "gpu-1"}},
        {"targets": ["gpu-2.fabric:31000"], "labels": {"host": "gpu-2", "__scheme__": "https"}},
        {"targets": ["gpu-3:30000"], "labels": {"host": "gpu-3"}},
    ]


def test_the_router_host_serves_smg_and_the_guard() -> None:
    jobs = scrape_targets(HOSTVARS, ["gpu-1"], ["router"])
    assert jobs["glm5-router"] == [{"targets": ["10.0.1.1:29000"], "labels": {"host": "router"}}]
    assert jobs["glm5-guard"] == [{"targets": ["10.0.1.1:29200"], "labels": {"host": "router"}}]


def test_dcgm_is_null_when_off_and_on_every_node_when_on() -> None:
    assert scrape_targets(HOSTVARS, ["gpu-1"], ["router"], 9400)["glm5-dcgm"] is None
    jobs = scrape_targets(HOSTVARS, ["gpu-1", "gpu-2"], [], 9400, dcgm=True)
    assert jobs["glm5-dcgm"] == [
        {"targets": ["10.0.0.1:9400"], "labels": {"host": "gpu-1"}},
        {"targets": ["gpu-2.fabric:9400"], "labels": {"host": "gpu-2"}},
    ]
    assert jobs["glm5-router"] == [] and jobs["glm5-guard"] == []
