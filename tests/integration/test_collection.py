"""The collection glm5.deploy as a user installs it: make collection's artifact, installed into an empty
collections path of a project of its own (conftest.user_project). ansible-doc documents every module, filter
and role from the artifact; test_site.py runs its site playbook, glm5.deploy.site, by its FQCN against the
lab."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

pytestmark = pytest.mark.controller

MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())


def _filters() -> list[str]:
    """Every filter the filter plugins export (FilterModule.filters()), each documented by its
    plugins/filter/<name>.yml."""
    names = []
    for path in (ROOT / "plugins" / "filter").glob("*.py"):
        module = importlib.import_module(f"ansible_collections.glm5.deploy.plugins.filter.{path.stem}")
        names += module.FilterModule().filters()
    return sorted(names)


FILTERS = _filters()


def ansible_doc(config: Path, *args: str) -> str:
    env = {**os.environ, "ANSIBLE_CONFIG": str(config), "ANSIBLE_NOCOLOR": "1"}
    argv = [str(ROOT / ".venv" / "bin" / "ansible-doc"), *args]
    done = subprocess.run(argv, cwd=config.parent, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    return done.stdout


def test_every_role_has_argument_specs() -> None:
    assert len(ROLES) == len([p for p in (ROOT / "roles").iterdir() if p.is_dir()])


def test_ansible_doc_documents_every_module_from_the_artifact(user_project: Path) -> None:
    text = ansible_doc(user_project, "-t", "module", *(f"glm5.deploy.{name}" for name in MODULES))
    installed = user_project.parent / "build" / "installed" / "ansible_collections" / "glm5" / "deploy"
    for name in MODULES:
        assert f"> MODULE glm5.deploy.{name} ({installed}/plugins/modules/{name}.py)" in text, name
    assert text.count("OPTIONS") == text.count("EXAMPLES") == text.count("RETURN VALUES") == len(MODULES)


def test_ansible_doc_documents_every_filter_from_the_artifact(user_project: Path) -> None:
    text = ansible_doc(user_project, "-t", "filter", *(f"glm5.deploy.{name}" for name in FILTERS))
    installed = user_project.parent / "build" / "installed" / "ansible_collections" / "glm5" / "deploy"
    for name in FILTERS:
        assert f"> FILTER glm5.deploy.{name} ({installed}/plugins/filter/{name}.yml)" in text, name
    assert text.count("EXAMPLES:") == text.count("RETURN VALUES:") == len(FILTERS)
    listed = json.loads(ansible_doc(user_project, "-t", "filter", "-l", "-j", "glm5.deploy"))
    assert sorted(listed) == [f"glm5.deploy.{name}" for name in FILTERS]
    assert not [fqcn for fqcn, description in listed.items() if description == "UNDOCUMENTED"]


def test_ansible_doc_documents_every_role_and_entry_point_from_the_artifact(user_project: Path) -> None:
    text = ansible_doc(user_project, "-t", "role", *(f"glm5.deploy.{name}" for name in ROLES))
    documented = re.findall(r"^> ROLE: \*glm5\.deploy\.(\w+)\*", text, re.M)
    assert sorted(documented) == ROLES
    specs = (yaml.safe_load((ROOT / "roles" / n / "meta/argument_specs.yml").read_text()) for n in ROLES)
    entry_points = sum(len(spec["argument_specs"]) for spec in specs)
    assert len(re.findall(r"^ENTRY POINT: ", text, re.M)) == entry_points


def test_the_artifact_is_versioned_and_self_contained(user_project: Path) -> None:
    """galaxy.yml's version names the artifact; it holds the collection's files, and no link out of it."""
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    (artifact,) = (user_project.parent / "build").glob("*.tar.gz")
    assert artifact.name == f"glm5-deploy-{galaxy['version']}.tar.gz"
    with tarfile.open(artifact) as tar:
        members = tar.getmembers()
    names = {m.name for m in members}
    # Links only to files of the artifact itself (the roles' copies of the unit templates and of the guard's
    # module_utils); none to a directory, none out of it.
    for link in (m for m in members if m.issym() or m.islnk()):
        target = os.path.normpath(os.path.join(os.path.dirname(link.name), link.linkname))
        assert target in names and not target.startswith(".."), (link.name, link.linkname)
        assert not next(m for m in members if m.name == target).isdir(), link.name
    wanted = {"meta/runtime.yml", "playbooks/site.yml", "roles/sglang_server/templates/sglang.service.j2"}
    wanted |= {"plugins/module_utils/sglang_flags.py", "plugins/data/lanes.yml", "plugins/filter/sglang.py"}
    assert wanted <= names
    assert {"roles/sglang_guard/files/judge_probes.py", "roles/sglang_guard/files/judge_verdict.py"} <= names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    # The license, the changelog (antsibull-changelog's collection format) and the production example ship;
    # the lab, its tests and the repository's links do not, and no shipped file names a path it lacks.
    assert {
        "LICENSE",
        "CHANGELOG.md",
        "changelogs/changelog.yaml",
        "inventory/production.example/hosts.yml",
        "tests/sanity/ignore-2.19.txt",
    } <= names
    assert not [
        n for n in names if n.split("/")[0] in {"lab", "molecule", "python_plugins", "collections", "build"}
    ]
    assert not [n for n in names if n.startswith(("tests/unit", "tests/integration", "inventory/lab"))]
    with tarfile.open(artifact) as tar:
        texts = {
            m.name: tar.extractfile(m).read().decode(errors="replace")  # type: ignore[union-attr]
            for m in members
            if m.isfile() and m.name.endswith((".md", ".yml", ".py", ".j2", ".json", ".cfg"))
        }
    assert not [name for name, text in texts.items() if "python_plugins/" in text], (
        "a path the artifact lacks"
    )
