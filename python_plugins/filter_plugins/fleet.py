"""Filters over the whole fleet's host variables."""

from __future__ import annotations

import os
from typing import Any

import ansible.module_utils

# Ansible's module_utils setting only reaches modules; filters run on the controller, so make the project's
# module_utils importable under the same name here.
_MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
if _MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MODULE_UTILS)

from ansible.module_utils.fleet_summary import fleet_summary  # noqa: E402


def glm5_fleet_summary(hosts: list[str], hostvars: Any) -> list[str]:
    """Per-host table of what was deployed and validated: ``hosts | glm5_fleet_summary(hostvars)``."""
    return fleet_summary(hosts, {h: hostvars[h] for h in hosts})


class FilterModule:
    """glm5-deploy fleet filters."""

    def filters(self) -> dict[str, Any]:
        return {"glm5_fleet_summary": glm5_fleet_summary}
