"""Run the real ansible-playbook on the controller only (fixture inventories with no reachable host)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def ansible_playbook(*args: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook of this venv with the project's ansible.cfg, from the project root (any rc)."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
