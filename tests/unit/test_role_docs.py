"""Every role documents every default: in meta/argument_specs.yml (with the same value) and in its README,
whose variable tables docs/role_readme.py generates from that spec (a stale README fails here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs"))
import role_readme

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p for p in (ROOT / "roles").iterdir() if (p / "defaults" / "main.yml").exists())


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
def test_every_default_is_in_the_roles_readme(role: Path) -> None:
    defaults = load(role / "defaults" / "main.yml")
    readme = (role / "README.md").read_text()
    missing = sorted(name for name in defaults if f"| `{name}` |" not in readme)
    assert not missing, f"{role.name}/README.md does not document: {missing}"


@pytest.mark.parametrize("role", sorted(p for p in (ROOT / "roles").iterdir()), ids=lambda p: p.name)
def test_the_roles_readme_tables_are_generated_from_its_spec(role: Path) -> None:
    """The README's generated part is exactly what docs/role_readme.py renders now (run `make docs`)."""
    readme = (role / "README.md").read_text()
    assert role_readme.BEGIN in readme and role_readme.END in readme, f"{role.name}: no generated part"
    assert role_readme.updated(readme, role_readme.role_part(role)) == readme, f"{role.name}: run `make docs`"


def test_the_generator_renders_types_defaults_and_secrets() -> None:
    specs = {
        "main": {
            "short_description": "A role.",
            "options": {
                "a_port": {"type": "int", "default": 80, "description": "The port."},
                "a_key": {
                    "type": "str",
                    "default": "",
                    "no_log": True,
                    "description": ["Two", "parts | piped."],
                },
                "a_host": {"type": "str", "description": "Templated."},
                "a_mode": {"type": "str", "choices": ["x", "y"], "required": True, "description": "Mode."},
                "a_list": {"type": "list", "elements": "str", "default": ["a", "b"], "description": "L."},
            },
        },
        "extra": {"short_description": "Another entry point.", "options": {}},
    }
    part = role_readme.render(specs, {"a_host": "{{ ansible_host | default('x') }}"})
    assert "| `a_port` | int | `80` | The port. |" in part
    assert '| `a_key` | str | `""` (secret: never shown) | Two parts \\| piped. |' in part
    assert "| `a_host` | str | `{{ ansible_host \\| default('x') }}` | Templated. |" in part
    assert "| `a_mode` | str (`x`, `y`) | required | Mode. |" in part
    assert "| `a_list` | list of str | `[a, b]` | L. |" in part
    assert "extra" not in part  # an entry point without options has no table
    readme = "# r\n\nWhat it does.\n"
    once = role_readme.updated(readme, part)
    assert once.startswith(readme.rstrip("\n")) and role_readme.updated(once, part) == once


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_has_a_comment(role: Path) -> None:
    lines = (role / "defaults" / "main.yml").read_text().splitlines()
    for number, line in enumerate(lines):
        if line and not line.startswith((" ", "#", "-")) and ":" in line:
            above = lines[number - 1] if number else ""
            assert above.startswith("#"), f"{role.name}: `{line.split(':')[0]}` has no comment line above it"


def test_profile_and_lane_choices_come_from_the_data() -> None:
    """The sglang role's spec offers exactly the profiles and deployable lanes of plugins/data."""
    options = spec_options(ROOT / "roles" / "sglang")
    data = ROOT / "plugins" / "data"
    profiles = sorted(p.stem for p in (data / "profiles").glob("*.yml"))
    lanes = load(data / "lanes.yml")["lanes"]
    deployable = sorted(name for name, lane in lanes.items() if lane.get("deployable"))
    assert options["sglang_profile"]["choices"] == ["", *profiles]
    # The lane is fleet-wide (cuda_toolkit and sglang_runtime read it too): its home is glm5_defaults.
    assert spec_options(ROOT / "roles" / "glm5_defaults")["sglang_lane"]["choices"] == ["", *deployable]


@pytest.fixture(scope="module")
def role_docs() -> dict[str, Any]:
    """`ansible-doc -t role --json` for every role at once (one process, not one a role)."""
    import subprocess

    roles = sorted(p.name for p in (ROOT / "roles").iterdir())
    doc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-doc"),
            "-t",
            "role",
            "-r",
            str(ROOT / "roles"),
            "--json",
            *roles,
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(doc.stdout)


@pytest.mark.parametrize("role", sorted(p.name for p in (ROOT / "roles").iterdir()))
def test_ansible_doc_documents_every_role(role: str, role_docs: dict[str, Any]) -> None:
    """`ansible-doc -t role` reads each role's argument spec (what an operator sees)."""
    entries = role_docs[role]["entry_points"]
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
