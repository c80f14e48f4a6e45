"""Shared pytest setup: make the project's collection importable as Ansible sees it."""

from __future__ import annotations

import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"

# Ansible loads plugins/module_utils/<name>.py as the collection's
# ansible_collections.glm5.deploy.plugins.module_utils.<name> (collections/ in the repository links to the
# root).
_COLLECTIONS = str(ROOT / "collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)

# make test runs these beside the lab suite, in the background of 2 shared cores (lab/bin/background): a
# wall-clock limit on generating or running one example says nothing about the code there. Every example
# still runs, and fails on what it asserts.
settings.register_profile("glm5", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("glm5")
