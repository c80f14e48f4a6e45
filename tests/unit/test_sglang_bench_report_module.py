"""modules/sglang_bench_report.py in-process: the report and the result files it keeps hold no key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from project_modules import load_module

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-bench"
KEY = "an-example-server-key-long-enough"  # the key in server-info-node.json

sglang_bench_report = load_module("sglang_bench_report")


def run_module(args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], str]:
    """Run main() with these arguments; the module's JSON result and its raw output."""
    with patch_module_args(args), pytest.raises(SystemExit):
        sglang_bench_report.main()
    out = capsys.readouterr().out
    return json.loads(out), out


def test_a_node_benchmarks_result_files_are_kept_without_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A record of the lab router's benchmark, given the server_info a node answers directly (tune.yml's
    case): the module's result, report.md and the raw file it keeps hold no key; a second run changes
    nothing."""
    record = json.loads((FIXTURES / "lab-router-c2.jsonl").read_text(encoding="utf-8").splitlines()[0])
    record["server_info"] = json.loads((FIXTURES / "server-info-node.json").read_text(encoding="utf-8"))
    raw = tmp_path / "raw" / "c2.jsonl"
    raw.parent.mkdir()
    raw.write_text(json.dumps(record) + "\n", encoding="utf-8")
    args = {"results": [str(raw)], "dest": str(tmp_path), "secrets": [KEY], "meta": {"target": "t"}}

    result, out = run_module(args, capsys)
    assert result.get("failed") is not True, result
    assert KEY not in out
    assert result["rows"][0]["server_info"]["api_key"] == "<hidden>"
    kept = raw.read_text(encoding="utf-8")
    assert KEY not in kept and json.loads(kept)["server_info"]["api_key"] == "<hidden>"
    assert KEY not in (tmp_path / "report.md").read_text(encoding="utf-8")
    assert result["changed"] is True

    again, _ = run_module(args, capsys)
    assert again["changed"] is False
