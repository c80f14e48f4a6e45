"""Filters over what dpkg says of a role's packages.

{{ dpkg_query_lines | glm5_packages_plan(packages, version, hold) }} -> {install: [...], select: [...]}
"""

from __future__ import annotations

from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.dpkg_state import packages_plan


def glm5_packages_plan(lines: list[str], packages: list[str], version: str, hold: bool) -> dict[str, Any]:
    return packages_plan(lines, packages, str(version), bool(hold))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"glm5_packages_plan": glm5_packages_plan}
