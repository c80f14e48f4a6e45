"""Every filter the collection's filter plugins export has its sidecar document (plugins/filter/<name>.yml, as
community.general documents its filters), and ansible-doc lists and prints each one, through the project's
ansible.cfg. ansible-doc runs twice for all of them (the list, then every filter at once), not once a filter:
the unit suite shares 2 cores with the lab suite."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
FILTER_DIR = ROOT / "plugins" / "filter"
ANSIBLE_DOC = Path(sys.executable).with_name("ansible-doc")
COLLECTION = "glm5.deploy"


def _exported() -> dict[str, str]:
    """Filter name -> the plugin file that exports it, from each file's FilterModule.filters()."""
    names: dict[str, str] = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        module = importlib.import_module(f"ansible_collections.glm5.deploy.plugins.filter.{path.stem}")
        for name in module.FilterModule().filters():
            assert name not in names, f"{name} is exported by {names.get(name)} and {path.name}"
            names[name] = path.name
    return names


FILTERS = _exported()
DOCS = {path.stem: path for path in sorted(FILTER_DIR.glob("*.yml"))}


def _ansible_doc(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [str(ANSIBLE_DOC), "-t", "filter", *args]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)


def test_there_are_filters() -> None:
    assert {"sglang_args", "sglang_profile", "systemd_exec", "glm5_gate_plan"} <= set(FILTERS)


def test_every_exported_filter_has_a_document_and_every_document_a_filter() -> None:
    assert sorted(set(FILTERS) - set(DOCS)) == [], "filters without plugins/filter/<name>.yml"
    assert sorted(set(DOCS) - set(FILTERS)) == [], "documents of no exported filter"


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_the_document_describes_its_filter(name: str) -> None:
    assert name in DOCS, f"{FILTERS[name]} exports {name}, which has no plugins/filter/{name}.yml"
    doc = yaml.safe_load(DOCS[name].read_text())
    assert set(doc) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    documentation = doc["DOCUMENTATION"]
    assert documentation["name"] == name
    assert documentation["short_description"] and documentation["description"]
    assert documentation["author"]
    assert documentation["options"]["_input"]["description"]
    assert doc["RETURN"]["_value"]["description"] and doc["RETURN"]["_value"]["type"]
    # The example calls the filter by its FQCN and is a list of tasks.
    assert f"{COLLECTION}.{name}" in doc["EXAMPLES"]
    tasks = yaml.safe_load(doc["EXAMPLES"])
    assert isinstance(tasks, list) and all(isinstance(task, dict) and task.get("name") for task in tasks)


@pytest.fixture(scope="module")
def listed() -> dict[str, str]:
    """ansible-doc -l's JSON (its text form cuts descriptions to the terminal's width)."""
    done = _ansible_doc("-l", "-j", COLLECTION)
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def printed() -> str:
    done = _ansible_doc(*(f"{COLLECTION}.{name}" for name in sorted(FILTERS)))
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr and "ERROR" not in done.stderr, done.stderr
    return done.stdout


def test_ansible_doc_lists_every_filter_with_its_description(listed: dict[str, str]) -> None:
    rows = {fqcn.removeprefix(f"{COLLECTION}."): description for fqcn, description in listed.items()}
    assert sorted(rows) == sorted(FILTERS)
    for name, description in rows.items():
        assert description != "UNDOCUMENTED", name
        assert description == yaml.safe_load(DOCS[name].read_text())["DOCUMENTATION"]["short_description"]


def test_ansible_doc_prints_every_filter(printed: str) -> None:
    shown = re.findall(rf"^> FILTER {re.escape(COLLECTION)}\.(\w+) \((.+)\)$", printed, re.M)
    assert sorted(name for name, _path in shown) == sorted(FILTERS)
    for name, path in shown:
        assert Path(path).name == f"{name}.yml", (name, path)
    assert printed.count("EXAMPLES:") == printed.count("RETURN VALUES:") == len(FILTERS)


def test_the_index_lists_every_filter_under_its_file() -> None:
    """plugins/filter/README.md: a reader who has a filter's name finds the file that holds it."""
    listed: dict[str, str] = {}
    current = ""
    for line in (FILTER_DIR / "README.md").read_text().splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
        elif current and line.startswith("`"):
            for name in re.findall(r"`([a-z0-9_]+)`", line):
                listed[name] = current
    assert listed == FILTERS
