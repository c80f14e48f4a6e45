"""One path from settings to ExecStart: the launch flags are rendered in one task (role sglang), and the unit
and the flags check use its fact. tests/integration/test_site.py checks the lab's units hold that
rendering."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RENDER = re.compile(r"glm5\.deploy\.sglang_args\(")


def product_files() -> list[Path]:
    roots = [ROOT / "roles", ROOT / "playbooks"]
    files = (p for root in roots for p in sorted(root.rglob("*")))
    return [p for p in files if p.suffix in {".yml", ".j2"} and p.is_file()]


def test_the_launch_flags_are_rendered_in_one_task() -> None:
    sites = [(p.relative_to(ROOT).as_posix(), len(RENDER.findall(p.read_text()))) for p in product_files()]
    assert [(path, n) for path, n in sites if n] == [("roles/sglang/tasks/main.yml", 1)]
    tasks = yaml.safe_load((ROOT / "roles/sglang/tasks/main.yml").read_text())
    (render,) = [t for t in tasks if RENDER.search(str(t))]
    assert set(render["ansible.builtin.set_fact"]) == {"sglang_launch_args"}
    assert "sglang_node_settings" in render["ansible.builtin.set_fact"]["sglang_launch_args"]


def test_the_unit_and_the_flags_check_use_that_rendering() -> None:
    unit = (ROOT / "roles/sglang_server/templates/sglang.service.j2").read_text()
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert "sglang_launch_args" in exec_start
    for name in ("main.yml", "pending.yml"):
        tasks = yaml.safe_load((ROOT / "roles/sglang_server/tasks" / name).read_text())
        (check,) = [t for t in tasks if "glm5.deploy.sglang_args_check" in t]
        assert check["glm5.deploy.sglang_args_check"]["args"] == "{{ sglang_launch_args }}", name
    prepare = yaml.safe_load((ROOT / "roles/sglang_server/tasks/prepare.yml").read_text())
    (include,) = [t for t in prepare if t.get("ansible.builtin.include_role", {}).get("name") == "sglang"]
    assert "sglang_node_settings" in include["vars"]
