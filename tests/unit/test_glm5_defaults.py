"""The fleet-wide values have one home, roles/glm5_defaults (as kubespray's kubespray-defaults): no other role
sets or re-states one, every role that reads one depends on that role, and its argument spec documents them
once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
HOME = ROLES / "glm5_defaults"
FLEET_WIDE = yaml.safe_load((HOME / "defaults" / "main.yml").read_text())
OTHERS = sorted(p for p in ROLES.iterdir() if p.is_dir() and p != HOME)
# Where a role reads its variables: its tasks, vars, defaults, templates and handlers.
READ_IN = ("tasks", "vars", "defaults", "templates", "handlers")
NAMES = re.compile(r"\b(" + "|".join(map(re.escape, FLEET_WIDE)) + r")\b")
# A name followed by a literal default: the value stated a second time (a default that names another variable,
# as hostvars[router].sglang_router_port | default(sglang_router_port), reads the one home).
RESTATED = re.compile(r"\b(" + "|".join(map(re.escape, FLEET_WIDE)) + r")\s*\|\s*default\(\s*['\"0-9]")
# The home's literal paths and names written out again anywhere (a default built from
# '/var/lib/sglang/models/' instead of preflight_model_dir): not followed by more of a name, so
# /opt/sglang-router is another path.
LITERALS = re.compile(
    "|".join(
        re.escape(v) + r"(?![\w-])" for v in FLEET_WIDE.values() if isinstance(v, str) and v and "{{" not in v
    )
)


# In a template only its Jinja reads a variable; the rest is the text it writes (an alert's description may
# name a variable).
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)


def load(path: Path) -> dict:
    """A YAML mapping, or {} for a file that is missing or empty."""
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


def role_text(role: Path) -> str:
    texts = []
    for part in READ_IN:
        for path in sorted((role / part).rglob("*")) if (role / part).is_dir() else []:
            if path.is_file():
                text = path.read_text()
                texts.append("\n".join(JINJA.findall(text)) if part == "templates" else text)
    return "\n".join(texts)


def test_the_home_holds_the_values_the_issue_names() -> None:
    for name in (
        "sglang_server_port",
        "sglang_router_port",
        "model_checkpoint_repo",
        "sglang_runtime_root",
        "sglang_lane",
    ):
        assert name in FLEET_WIDE, name
    assert {n for n in FLEET_WIDE if n.endswith(("_api_key", "_admin_key"))} == {
        "sglang_server_api_key",
        "sglang_server_admin_api_key",
        "sglang_router_api_key",
        "sglang_router_admin_key",
        "sglang_router_worker_api_key",
    }
    assert not (HOME / "tasks").exists(), "glm5_defaults only provides values"


@pytest.mark.parametrize("role", OTHERS, ids=lambda p: p.name)
def test_no_other_role_sets_or_restates_a_fleet_wide_value(role: Path) -> None:
    own = load(role / "defaults" / "main.yml")
    assert not set(own) & set(FLEET_WIDE), f"{role.name} sets {sorted(set(own) & set(FLEET_WIDE))}"
    text = role_text(role)
    assert not RESTATED.findall(text), f"{role.name} re-states {RESTATED.findall(text)}"
    assert not LITERALS.findall(text), f"{role.name} writes out {LITERALS.findall(text)}"
    spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    documented = {name for entry in spec.values() for name in (entry.get("options") or {})}
    assert not documented & set(FLEET_WIDE), f"{role.name} documents {sorted(documented & set(FLEET_WIDE))}"


@pytest.mark.parametrize("role", OTHERS, ids=lambda p: p.name)
def test_every_role_that_reads_one_depends_on_the_home_and_no_other_does(role: Path) -> None:
    read = sorted(set(NAMES.findall(role_text(role))))
    dependencies = load(role / "meta" / "main.yml").get("dependencies") or []
    named = {d.get("role") if isinstance(d, dict) else d for d in dependencies}
    assert ("glm5.deploy.glm5_defaults" in named) == bool(read), (role.name, read, sorted(named))


def test_the_spec_documents_each_value_once_with_its_default() -> None:
    options = yaml.safe_load((HOME / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
        "options"
    ]
    assert list(options) == list(FLEET_WIDE)
    for name, value in FLEET_WIDE.items():
        assert options[name].get("description"), name
        if "{{" not in str(value):
            assert options[name]["default"] == value, name
        if name.endswith(("_api_key", "_admin_key")):
            assert options[name].get("no_log") is True, name
