"""Every custom module's documentation renders with ansible-doc, through the project's ansible.cfg."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
ANSIBLE_DOC = Path(sys.executable).with_name("ansible-doc")


def test_there_are_modules() -> None:
    assert {"nvidia_gpu_facts", "sglang_inference_check", "sglang_args_check"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders(name: str) -> None:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [str(ANSIBLE_DOC), "-t", "module", f"glm5.deploy.{name}"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "OPTIONS" in done.stdout and "EXAMPLES" in done.stdout and "RETURN VALUES" in done.stdout
    assert "ERROR" not in done.stderr
