"""Write (or check) the variable reference of each role's README from its meta/argument_specs.yml.

Each roles/<role>/README.md has a hand-kept part (what the role does, how) and a generated part between
the two markers below: one table per entry point (`main`, and each `tasks_from` others use), each option with
its type, its default (the spec's, else the templated expression of defaults/main.yml) and its description.
argument_specs is the one source: `ansible-doc -t role`, the inputs check and these tables read it.

    python docs/role_readme.py           # rewrite the generated part of every role's README
    python docs/role_readme.py --check   # exit 1 naming each stale README (make unit checks the same)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- BEGIN variables: generated from meta/argument_specs.yml by docs/role_readme.py; edit those -->"
END = "<!-- END variables -->"


def _text(value: Any) -> str:
    """A description (a string or a list of paragraphs) on one table line."""
    parts = value if isinstance(value, list) else [value or ""]
    return " ".join(" ".join(str(p).split()) for p in parts).replace("|", "\\|")


def _code(value: Any) -> str:
    """A default as inline code (flow YAML for lists and mappings)."""
    if isinstance(value, str):
        shown = " ".join(value.split()) if "{{" in value else value
        return f"`{shown}`".replace("|", "\\|") if shown else '`""`'
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    dumped = dumped.removesuffix("\n...").removesuffix("...").strip()
    return f"`{dumped}`".replace("|", "\\|")


def _type(option: dict[str, Any]) -> str:
    kind = option.get("type", "str")
    if kind == "list" and option.get("elements"):
        kind = f"list of {option['elements']}"
    if option.get("choices"):
        kind += " (" + ", ".join(_code(c) for c in option["choices"]) + ")"
    return kind


def render(specs: dict[str, Any], defaults: dict[str, Any]) -> str:
    """The generated part of a role's README: one table per entry point with options."""
    lines = [BEGIN, ""]
    for entry, spec in specs.items():
        options = spec.get("options") or {}
        if not options:
            continue
        title = "`main` (the role)" if entry == "main" else f"`tasks_from: {entry}`"
        lines += [f"### {title}", ""]
        if entry != "main":
            lines += [_text(spec.get("short_description")), ""]
        lines += ["| variable | type | default | description |", "|---|---|---|---|"]
        for name, option in options.items():
            if "default" in option:
                default = _code(option["default"])
            elif name in defaults:
                default = _code(defaults[name])
            elif option.get("required"):
                default = "required"
            else:
                default = "none"
            if option.get("no_log"):
                default += " (secret: never shown)"
            lines.append(f"| `{name}` | {_type(option)} | {default} | {_text(option.get('description'))} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def role_part(role: Path) -> str:
    """The generated part for ``role``, from its argument_specs and defaults."""
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults_file = role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.exists() else {}
    return render(specs, defaults)


def updated(readme: str, part: str) -> str:
    """``readme`` with its generated part replaced by ``part`` (appended under a heading when missing)."""
    if BEGIN in readme and END in readme:
        head, _, rest = readme.partition(BEGIN)
        _, _, tail = rest.partition(END)
        return head + part + tail
    return readme.rstrip("\n") + "\n\n## Variables\n\n" + part + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail on a stale README instead of writing it")
    parser.add_argument("--roles", type=Path, default=ROOT / "roles")
    args = parser.parse_args(argv)
    stale = []
    for role in sorted(p for p in args.roles.iterdir() if (p / "meta" / "argument_specs.yml").exists()):
        path = role / "README.md"
        current = path.read_text() if path.exists() else ""
        wanted = updated(current, role_part(role))
        if wanted != current:
            stale.append(path)
            if not args.check:
                path.write_text(wanted)
    if args.check and stale:
        names = ", ".join(str(p.relative_to(args.roles.parent)) for p in stale)
        print(f"stale role READMEs (run `make docs`): {names}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
