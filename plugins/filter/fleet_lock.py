"""Filters for the fleet lock (role fleet_lock, module_utils/fleet_lock.py), on the controller.

{{ holder | fleet_lock_gone(me) }}  -> whether holder is a run of this controller whose process has ended
{{ holder | fleet_lock_describe }}  -> the holder in words (who, where, which process, since when, what)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.fleet_lock import describe, holder_gone


def _stat(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text()


def fleet_lock_gone(holder: dict[str, Any], me: dict[str, Any]) -> bool:
    """True when ``holder`` ran on this controller and its ansible-playbook process has ended."""
    return holder_gone(holder or {}, me, _stat)


def fleet_lock_describe(holder: dict[str, Any]) -> str:
    """The holder in words; a damaged record says so."""
    if (holder or {}).get("damaged"):
        return f"an unreadable lock record ({holder['damaged']})"
    return describe(holder or {}, datetime.now(UTC))


class FilterModule:
    """The fleet lock's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"fleet_lock_gone": fleet_lock_gone, "fleet_lock_describe": fleet_lock_describe}
