"""Filters for the node_state module.

{{ items | node_state_expect }}                -> the items with `content` replaced by its SHA-1
{{ paths | node_state_files(contents, mode=...) }} -> managed files from paths and contents, in order
{{ items | node_state_present(wanted) }}       -> the items, or each file as absent when not wanted
(module_utils/node_state.py)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.node_state import expect, files, present


class FilterModule:
    """node_state's filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"node_state_expect": expect, "node_state_files": files, "node_state_present": present}
