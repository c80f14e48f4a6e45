"""Every role documents every default: in meta/argument_specs.yml (with the same value) and in the README."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "defaults" / "main.yml").exists())
README = (ROOT / "README.md").read_text()


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def spec_options(role: Path) -> dict[str, dict[str, Any]]:
    specs = load(role / "meta" / "argument_specs.yml")["argument_specs"]
    options: dict[str, dict[str, Any]] = {}
    for entry in specs.values():
        options.update(entry.get("options") or {})
    return options


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_in_the_argument_spec_with_its_value(role: Path) -> None:
    defaults = load(role / "defaults" / "main.yml")
    options = spec_options(role)
    missing = sorted(set(defaults) - set(options))
    assert not missing, f"{role.name}: defaults missing from meta/argument_specs.yml: {missing}"
    for name, value in defaults.items():
        if "{{" in json.dumps(value):
            continue  # a templated default is described, not repeated
        assert options[name].get("default") == value, f"{role.name}: {name} default differs from its spec"
        assert options[name].get("description"), f"{role.name}: {name} has no description"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_is_in_the_readme(role: Path) -> None:
    defaults = load(role / "defaults" / "main.yml")
    missing = sorted(name for name in defaults if f"`{name}`" not in README)
    assert not missing, f"README.md does not document {role.name} variables: {missing}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_has_a_comment(role: Path) -> None:
    lines = (role / "defaults" / "main.yml").read_text().splitlines()
    for number, line in enumerate(lines):
        if line and not line.startswith((" ", "#", "-")) and ":" in line:
            above = lines[number - 1] if number else ""
            assert above.startswith("#"), f"{role.name}: `{line.split(':')[0]}` has no comment line above it"


def test_profile_and_lane_choices_come_from_the_data() -> None:
    """The sglang role's spec offers exactly the profiles and deployable lanes of python_plugins/data."""
    options = spec_options(ROOT / "roles" / "sglang")
    data = ROOT / "python_plugins" / "data"
    profiles = sorted(p.stem for p in (data / "profiles").glob("*.yml"))
    lanes = load(data / "lanes.yml")["lanes"]
    deployable = sorted(name for name, lane in lanes.items() if lane.get("deployable"))
    assert options["sglang_profile"]["choices"] == ["", *profiles]
    assert options["sglang_lane"]["choices"] == ["", *deployable]


@pytest.mark.parametrize("role", sorted(p.name for p in (ROOT / "roles").iterdir()))
def test_ansible_doc_documents_every_role(role: str) -> None:
    """`ansible-doc -t role` reads each role's argument spec (what an operator sees)."""
    import subprocess
    import sys

    doc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-doc"),
            "-t",
            "role",
            "-r",
            str(ROOT / "roles"),
            "--json",
            role,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    entries = json.loads(doc.stdout)[role]["entry_points"]
    assert entries["main"]["short_description"]
    for entry in entries.values():
        for name, option in (entry.get("options") or {}).items():
            assert option.get("description"), f"{role}: {name} has no description"
            assert option.get("type"), f"{role}: {name} has no type"


def test_every_secret_option_is_no_log() -> None:
    """Keys and tokens are no_log in every spec: the inputs check leaves them out of what it prints."""
    for role in ROLES:
        for name, option in spec_options(role).items():
            if name.endswith(("_api_key", "_admin_key", "_token", "_password", "_secret")):
                assert option.get("no_log") is True, f"{role.name}: {name} is not no_log"
