"""Every entry point another role or a playbook uses (include_role/import_role with tasks_from) is declared in
that role's meta/argument_specs.yml, so that it is documented (`ansible-doc -t role`, the README's tables).

Ansible names an entry point by the task file's stem (`tasks_from: stage.yml` -> entry point `stage`); it
validates the variables against that entry point's spec when the include names it by its stem."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("roles", "playbooks", "molecule", "lab")
INCLUDES = {
    f"{prefix}{action}"
    for prefix in ("", "ansible.builtin.", "ansible.legacy.")
    for action in ("include_role", "import_role")
}
COLLECTION = "glm5.deploy."


class _Loader(yaml.SafeLoader):
    """A safe loader that reads Ansible's tags (!vault, !unsafe) as their plain value."""


def _plain(loader: _Loader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)


_Loader.add_multi_constructor("!", _plain)


def _yaml_files() -> Iterator[Path]:
    yield ROOT / "site.yml"
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if path.suffix not in (".yml", ".yaml") or not path.is_file() or "templates" in parts:
                continue
            if not any(part.startswith(".") for part in parts):  # caches (molecule/*/.cache)
                yield path


def _includes(node: Any) -> Iterator[dict[str, Any]]:
    """The arguments of every include_role/import_role under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in INCLUDES and isinstance(value, dict):
                yield value
            else:
                yield from _includes(value)
    elif isinstance(node, list):
        for item in node:
            yield from _includes(item)


def entry_point(tasks_from: str) -> str:
    """The entry point a tasks_from names: its file's stem."""
    name = Path(tasks_from).name
    for suffix in (".yml", ".yaml"):
        name = name.removesuffix(suffix)
    return name


def used_entry_points() -> dict[tuple[str, str], list[str]]:
    """(role, entry point) -> the files that include it, for every tasks_from in the scanned YAML."""
    used: dict[tuple[str, str], list[str]] = {}
    for path in _yaml_files():
        doc = yaml.load(path.read_text(), Loader=_Loader)
        for args in _includes(doc):
            role, tasks_from = str(args.get("name", "")), args.get("tasks_from")
            if not tasks_from or "{{" in role or "{{" in str(tasks_from):
                continue
            role = role.removeprefix(COLLECTION)
            used.setdefault((role, entry_point(str(tasks_from))), []).append(str(path.relative_to(ROOT)))
    return used


def declared(role: str) -> dict[str, Any]:
    """The entry points roles/<role>/meta/argument_specs.yml declares: name -> spec."""
    specs = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    if not specs.exists():
        return {}
    return (yaml.safe_load(specs.read_text()) or {}).get("argument_specs") or {}


USED = used_entry_points()


def test_the_scan_finds_the_entry_points_the_playbooks_use() -> None:
    assert ("fleet_lock", "release") in USED and ("sglang_rollout", "stage") in USED, sorted(USED)
    assert entry_point("stage.yml") == entry_point("stage") == "stage"


@pytest.mark.parametrize("pair", sorted(USED), ids=lambda p: f"{p[0]}-{p[1]}")
def test_every_used_entry_point_is_declared(pair: tuple[str, str]) -> None:
    role, entry = pair
    assert (ROOT / "roles" / role / "tasks" / f"{entry}.yml").exists(), f"{role}: no tasks/{entry}.yml"
    assert entry in declared(role), (
        f"roles/{role}/meta/argument_specs.yml declares no entry point {entry!r}, "
        f"which {', '.join(USED[pair])} include(s)"
    )


@pytest.mark.parametrize("pair", sorted(USED), ids=lambda p: f"{p[0]}-{p[1]}")
def test_every_declared_entry_point_says_what_it_does(pair: tuple[str, str]) -> None:
    role, entry = pair
    spec = declared(role).get(entry) or {}
    assert spec.get("short_description"), f"{role}: entry point {entry!r} has no short_description"
