"""Run the real ansible-playbook on the controller only (fixture inventories with no reachable host)."""

from __future__ import annotations

import base64
import io
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def payloads_kept(remote_tmp: Path) -> dict[str, dict[str, bytes]]:
    """Every module payload a run kept (ANSIBLE_KEEP_REMOTE_FILES) under ``remote_tmp``, by module file: each
    entry's bytes."""
    found = {}
    for script in remote_tmp.rglob("AnsiballZ_*.py"):
        data = re.search(r"zip_data='([^']*)'", script.read_text()).group(1)
        with zipfile.ZipFile(io.BytesIO(base64.b64decode(data))) as zf:
            found[script.name] = {name: zf.read(name) for name in zf.namelist()}
    return found


def play_keeping_payloads(
    play: Path, remote_tmp: Path, callbacks: Sequence[str], monkeypatch: Any
) -> tuple[str, dict[str, dict[str, bytes]]]:
    """Run ``play`` (whose last task is named "Show them") with only ``callbacks`` enabled, keeping its
    module payloads in ``remote_tmp`` (no pipelining): what it showed from that task to the recap, and the
    payloads."""
    monkeypatch.setenv("ANSIBLE_PIPELINING", "0")
    monkeypatch.setenv("ANSIBLE_KEEP_REMOTE_FILES", "1")
    monkeypatch.setenv("ANSIBLE_REMOTE_TMP", str(remote_tmp))
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", ",".join(callbacks))
    run = ansible_playbook(str(play))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    shown = run.stdout[run.stdout.index("TASK [Show them]") : run.stdout.index("PLAY RECAP")]
    return shown, payloads_kept(remote_tmp)
