"""Preflight capacity helpers."""

from __future__ import annotations

from ansible_collections.glm5.deploy.plugins.module_utils.node_resources import (
    GIB,
    nearest_existing,
    parse_meminfo,
    shortfalls,
)


def test_nearest_existing_walks_up_to_an_existing_ancestor() -> None:
    existing = {"/", "/var", "/var/lib"}
    assert nearest_existing("/var/lib/sglang/models/x", existing.__contains__) == "/var/lib"
    assert nearest_existing("/var", existing.__contains__) == "/var"
    assert nearest_existing("/nope/deeper", existing.__contains__) == "/"


def test_parse_meminfo() -> None:
    assert parse_meminfo("MemFree: 1 kB\nMemTotal:       24576000 kB\n") == 24576000 * 1024


def test_shortfalls_name_each_variable() -> None:
    problems = shortfalls({"/m": 10 * GIB}, {"/m": 500}, 16 * GIB, 256, GIB // 16, 32)
    assert len(problems) == 3
    assert "preflight_min_free_disk_gib 500" in problems[0] and "model_checkpoint_local_dir" in problems[0]
    assert "preflight_min_ram_gib 256" in problems[1]
    assert "preflight_min_shm_gib 32" in problems[2]


def test_no_shortfall_at_or_above_the_floors() -> None:
    assert shortfalls({"/m": 500 * GIB}, {"/m": 500}, 256 * GIB, 256, 32 * GIB, 32) == []
