"""The lab's nvidia-modprobe stand-in fails where the real one fails under the hardened unit (a caller that
is not root: NoNewPrivileges voids its setuid bit) and on options the unit never passes; the lab's
integration test reads what it recorded when it ran."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parents[2] / "lab" / "apt" / "standin" / "nvidia-modprobe"


def run(*argv: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
    as_user = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user is not None else []
    return subprocess.run([*as_user, "sh", str(STANDIN), *argv], capture_output=True, text=True, check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="setpriv needs root to run the stand-in as another user")
def test_a_caller_that_is_not_root_cannot_load_nvidia_uvm() -> None:
    ran = run("-u", "-c=0", user=65534)
    assert ran.returncode == 1
    assert "not root" in ran.stderr and "nvidia-uvm" in ran.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the check for root comes first")
@pytest.mark.parametrize("option", ["--unified-memory", "-c", "-c=x", "-c=1000", "-x"])
def test_an_option_the_unit_never_passes_is_refused(option: str) -> None:
    ran = run("-u", option)
    assert ran.returncode == 1
    assert f"unknown option {option}" in ran.stderr
