"""Filters over what dpkg says of a role's packages.

{{ dpkg_query_lines | glm5_packages_plan(packages, version, hold) }} -> {install: [...], select: [...]}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ansible.module_utils

# Ansible gives modules the configured module_utils; a controller-side plugin finds them this way.
_MU = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.dpkg_state import packages_plan  # noqa: E402


def glm5_packages_plan(lines: list[str], packages: list[str], version: str, hold: bool) -> dict[str, Any]:
    return packages_plan(lines, packages, str(version), bool(hold))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"glm5_packages_plan": glm5_packages_plan}
