"""Filters for the node_state module.

{{ items | node_state_expect }}                -> the items with `content` replaced by its SHA-1
{{ paths | node_state_files(contents, mode=...) }} -> managed files from paths and contents, in order
(module_utils/node_state.py)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ansible.module_utils

# Ansible gives modules the configured module_utils; a controller-side plugin finds them this way.
_MU = str(Path(__file__).resolve().parents[1] / "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

from ansible.module_utils.node_state import expect, files  # noqa: E402


class FilterModule:
    """node_state's filter."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"node_state_expect": expect, "node_state_files": files}
