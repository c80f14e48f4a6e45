"""The dependency declarations (requirements.yml, lab/requirements.yml, execution-environment.yml): each one
names what the code uses, and ansible-builder turns the execution environment into a build context."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
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
    """ansible-builder create, as make ee runs it: a maintained base image, the control node's pins, ssh,
    ansible.posix, and glm5.deploy itself (its artifact, built here from this tree)."""
    bindir = Path(sys.executable).parent
    builder = shutil.which("ansible-builder", path=str(bindir))
    assert builder, "ansible-builder is missing from the venv (requirements/control.txt)"
    # The files execution-environment.yml names, and the artifact where make ee puts it.
    project = tmp_path / "project"
    shutil.copytree(ROOT / "requirements", project / "requirements")
    shutil.copy(ROOT / "execution-environment.yml", project)
    built = subprocess.run(
        [str(bindir / "ansible-galaxy"), "collection", "build", str(ROOT), "--output-path", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (project / "build" / "ee").mkdir(parents=True)
    (artifact,) = tmp_path.glob("glm5-deploy-*.tar.gz")
    shutil.copy(artifact, project / "build" / "ee" / "glm5-deploy.tar.gz")
    done = subprocess.run(
        [builder, "create", "-f", "execution-environment.yml", "-c", str(tmp_path / "context")],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    build = tmp_path / "context" / "_build"
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert 'EE_BASE_IMAGE="registry.access.redhat.com/ubi9/ubi:latest"' in containerfile
    assert "ansible-galaxy collection install" in containerfile and "COPY _build /build" in containerfile
    python = (build / "requirements.txt").read_text()
    assert "matplotlib==" in python and "jinja2==" in python
    assert "openssh" in (build / "bindep.txt").read_text()
    collections = yaml.safe_load((build / "requirements.yml").read_text())["collections"]
    assert {"name": "ansible.posix", "version": "2.1.0"} in collections
    assert {"name": "collections/glm5-deploy.tar.gz", "type": "file"} in collections
    with tarfile.open(build / "collections" / "glm5-deploy.tar.gz") as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    assert (
        manifest["collection_info"]["namespace"] == "glm5" and manifest["collection_info"]["name"] == "deploy"
    )
    # The pins are the control node's: one version of each package on both sides.
    lock = (ROOT / "requirements" / "control.lock").read_text().lower().splitlines()
    pins = [line for line in python.lower().splitlines() if "==" in line and not line.startswith("#")]
    assert pins and set(pins) <= set(lock), set(pins) - set(lock)
    # ansible.posix here is the one the control node's ansible bundle carries.
    import ansible_collections.ansible.posix as posix

    carried = json.loads((Path(posix.__path__[0]) / "MANIFEST.json").read_text())["collection_info"][
        "version"
    ]
    assert carried == "2.1.0"
