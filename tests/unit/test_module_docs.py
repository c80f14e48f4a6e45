"""Every custom module's documentation renders with ansible-doc, through the project's ansible.cfg."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
ANSIBLE_DOC = Path(sys.executable).with_name("ansible-doc")


def test_there_are_modules() -> None:
    assert {"nvidia_gpu_facts", "sglang_inference_check", "sglang_args_check"} <= set(MODULES)


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    """Every module's ansible-doc text, by name: one ansible-doc for all of them (its start-up is most of a
    call), split at each module's heading."""
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    argv = [str(ANSIBLE_DOC), "-t", "module", *(f"glm5.deploy.{name}" for name in MODULES)]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "ERROR" not in done.stderr, done.stderr
    parts = re.split(r"^> MODULE glm5\.deploy\.(\w+) ", done.stdout, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders(name: str, rendered: dict[str, str]) -> None:
    text = rendered[name]
    assert "OPTIONS" in text and "EXAMPLES" in text and "RETURN VALUES" in text
