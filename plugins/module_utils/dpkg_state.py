"""What dpkg says of a set of packages, and what a role must still ask apt for (pure functions)."""

from __future__ import annotations

from collections.abc import Iterable


def parse_dpkg_query(lines: Iterable[str]) -> dict[str, dict[str, str]]:
    """{name: {version, selection}} for the installed packages in the output of
    `dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' <packages>`.

    The status's first letter is the selection (h = hold, i = install), its second the state (i = installed);
    packages dpkg knows but has not installed are left out."""
    installed: dict[str, dict[str, str]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) < 3 or len(parts[2]) < 2 or parts[2][0] not in "hi" or parts[2][1] != "i":
            continue
        installed[parts[0]] = {"version": parts[1], "selection": "hold" if parts[2][0] == "h" else "install"}
    return installed


def packages_plan(
    lines: Iterable[str], packages: Iterable[str], version: str, hold: bool
) -> dict[str, list[str]]:
    """What differs from the wanted state: `install`, the packages not installed at `version`; `select`, those
    not yet at the wanted selection (hold or install)."""
    installed = parse_dpkg_query(lines)
    wanted = "hold" if hold else "install"
    names = list(packages)
    return {
        "install": [p for p in names if installed.get(p, {}).get("version") != version],
        "select": [p for p in names if installed.get(p, {}).get("selection") != wanted],
    }
