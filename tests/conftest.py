"""Shared pytest setup: make the project's module_utils importable as Ansible sees them."""

from __future__ import annotations

from pathlib import Path

import ansible.module_utils
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

# Ansible loads python_plugins/module_utils/<name>.py as ansible.module_utils.<name>; do the same here.
_MU = str(ROOT / "python_plugins" / "module_utils")
if _MU not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(_MU)

# make test runs these beside the lab suite, in the background of 2 shared cores (lab/bin/background): a
# wall-clock limit on generating or running one example says nothing about the code there. Every example
# still runs, and fails on what it asserts.
settings.register_profile("glm5", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("glm5")
