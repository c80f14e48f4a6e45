"""Filters that write values into systemd unit and environment files.

{{ argv | systemd_exec }}                    -> one ExecStart= command line
{{ environment | systemd_environment_file }} -> the text of an EnvironmentFile=
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.glm5.deploy.plugins.module_utils.systemd_unit import (
    SystemdQuoteError,
    environment_file,
    exec_command,
)


def systemd_exec(argv: Iterable[Any]) -> str:
    """An argument vector as one ExecStart= command line."""
    try:
        return exec_command(list(argv))
    except SystemdQuoteError as exc:
        raise AnsibleFilterError(f"systemd_exec: {exc}") from exc


def systemd_environment_file(environment: Mapping[str, Any]) -> str:
    """A mapping as the text of an EnvironmentFile=."""
    try:
        return environment_file(dict(environment))
    except SystemdQuoteError as exc:
        raise AnsibleFilterError(f"systemd_environment_file: {exc}") from exc


class FilterModule:
    """systemd quoting filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"systemd_exec": systemd_exec, "systemd_environment_file": systemd_environment_file}
