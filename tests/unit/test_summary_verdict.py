"""playbooks/summary.yml run by the real ansible-playbook on the controller (local connection, no lab): the
summary names where each replica is, each failed node fails with its symptom, and a run in which no replica
passed says so loudly instead of leaving the router empty in silence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from controller_play import ROOT, ansible_playbook

NAN = "probe '2+2': degenerate output '!!!!!!!!'"


def summary(tmp_path: Path, verdicts: dict[str, bool]) -> subprocess.CompletedProcess[str]:
    """summary.yml over one host per verdict, as validate.yml leaves them (verdict and routing fact)."""
    hosts = {
        h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in verdicts
    }
    for host, passed in verdicts.items():
        result = {"passed": passed} if passed else {"passed": False, "msg": f"{host}: {NAN}"}
        hosts[host] |= {"sglang_validate_result": result, "sglang_router_replica": "in" if passed else "out"}
    inventory = {
        "all": {
            "children": {
                "sglang_nodes": {"hosts": hosts},
                "sglang_router": {"hosts": {"gw": hosts[next(iter(hosts))]}},
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    return ansible_playbook("-i", str(tmp_path / "hosts.yml"), str(ROOT / "playbooks" / "summary.yml"))


@pytest.mark.parametrize(
    ("verdicts", "failed", "none_passed"),
    [
        ({"n1": True, "n2": False, "n3": True}, ["n2"], False),
        ({"n1": False, "n2": False}, ["n1", "n2"], True),
    ],
)
def test_the_verdict_fails_exactly_the_bad_nodes(tmp_path, verdicts, failed, none_passed) -> None:
    done = summary(tmp_path, verdicts)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-2000:]
    out = done.stdout
    for host in verdicts:
        assert (f"fatal: [{host}]" in out) == (host in failed), out[-3000:]
    assert "out of the router: " in out and "Out of the router." in out
    assert ("No replica checked in this run passed" in out) == none_passed, out[-3000:]
