"""The dependency declarations (requirements.yml, lab/requirements.yml, execution-environment.yml): each one
names what the code uses, and ansible-builder turns the execution environment into a build context."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
# A task's module key: `namespace.collection.module:` at the start of a line (after a list dash).
FQCN = re.compile(r"^\s*(?:- )?([a-z_]+\.[a-z_]+)\.[a-z_]+:(?:\s|$)", re.MULTILINE)


def collections_used(*dirs: str) -> set[str]:
    """The collections whose modules the YAML under ``dirs`` calls (``namespace.name.module:``)."""
    used = set()
    for top in dirs:
        for path in (ROOT / top).rglob("*.yml"):
            used |= set(FQCN.findall(path.read_text()))
    return used - {"ansible.builtin"}


def declared(path: str) -> set[str]:
    return {c["name"] for c in yaml.safe_load((ROOT / path).read_text())["collections"]}


def test_the_product_and_the_lab_declare_the_collections_they_call() -> None:
    assert collections_used("roles", "playbooks") <= declared("requirements.yml")
    assert {"containers.podman", "community.general"} <= declared("lab/requirements.yml")
    lab = declared("lab/requirements.yml") | declared("requirements.yml")
    assert collections_used("lab", "molecule") <= lab


def test_the_execution_environment_builds_a_context_with_the_control_sides_packages(tmp_path: Path) -> None:
    builder = shutil.which("ansible-builder", path=str(Path(sys.executable).parent))
    assert builder, "ansible-builder is missing from the venv (requirements/control.txt)"
    done = subprocess.run(
        [builder, "create", "-f", "execution-environment.yml", "-c", str(tmp_path / "context")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    build = tmp_path / "context" / "_build"
    assert 'EE_BASE_IMAGE="quay.io/fedora/fedora:40"' in (tmp_path / "context" / "Containerfile").read_text()
    python = (build / "requirements.txt").read_text()
    assert "matplotlib==" in python and "jinja2==" in python
    assert "openssh" in (build / "bindep.txt").read_text()
    assert yaml.safe_load((build / "requirements.yml").read_text()) == {"collections": []}
    # The pins are the control node's: one version of each package on both sides.
    lock = (ROOT / "requirements" / "control.lock").read_text().lower().splitlines()
    pins = [line for line in python.lower().splitlines() if "==" in line and not line.startswith("#")]
    assert pins and set(pins) <= set(lock), set(pins) - set(lock)
