"""Shared pytest setup: make the project's module_utils importable as Ansible sees them."""

from __future__ import annotations

from pathlib import Path

import ansible.module_utils

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

# Ansible loads python_plugins/module_utils/<name>.py as ansible.module_utils.<name>; do the same here.
_MU = str(ROOT / "python_plugins" / "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)
