"""Load the project's Ansible modules (plugins/modules/*.py) for in-process tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

MODULES = Path(__file__).resolve().parents[2] / "plugins" / "modules"


def load_module(name: str) -> ModuleType:
    """plugins/modules/<name>.py, executed as the module `name`."""
    spec = importlib.util.spec_from_file_location(name, MODULES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
