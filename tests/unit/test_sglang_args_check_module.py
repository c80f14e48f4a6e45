"""modules/sglang_args_check.py in-process: the stamps of cache_dir (the real parser runs in tests/parser)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_parser_check import check_cache_key
from project_modules import load_module

sglang_args_check = load_module("sglang_args_check")


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A release's venv as sglang_runtime lays it out: releases/<name>/venv, reached through `current`."""
    root = tmp_path / "releases" / "0.5.23-abc" / "venv"
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / "bin" / "python").symlink_to("/usr/bin/python3")
    (tmp_path / "current").symlink_to(tmp_path / "releases" / "0.5.23-abc")
    return tmp_path / "current" / "venv"


@pytest.fixture
def parser_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Stand in for the parser build (it imports sglang): accept every argv except one with --bad."""
    calls: list[list[str]] = []

    def fake(python: str, argvs: list[list[str]], runner: Any) -> list[dict[str, Any]]:
        calls.append(list(argvs[0]))
        ok = "--bad" not in argvs[0]
        return [{"ok": ok, "sglang_version": "0.5.23", "error": "" if ok else "unrecognized", "values": {}}]

    monkeypatch.setattr(sglang_args_check, "run_parser_checks", fake)
    return calls


def run(capsys: pytest.CaptureFixture[str], **args: Any) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        sglang_args_check.main()
    return json.loads(capsys.readouterr().out)


def test_a_passed_check_is_remembered_and_not_built_again(venv, parser_calls, tmp_path, capsys) -> None:
    cache = tmp_path / "cache"
    first = run(capsys, python=str(venv / "bin" / "python"), args=["--tp-size", "8"], cache_dir=str(cache))
    again = run(capsys, python=str(venv / "bin" / "python"), args=["--tp-size", "8"], cache_dir=str(cache))
    assert (first["cached"], again["cached"]) == (False, True)
    assert first["accepted"] and again["accepted"] and again["sglang_version"] == "0.5.23"
    assert len(parser_calls) == 1 and len(list(cache.iterdir())) == 1


def test_other_flags_or_a_rebuilt_venv_are_checked_again(venv, parser_calls, tmp_path, capsys) -> None:
    cache = tmp_path / "cache"
    python = str(venv / "bin" / "python")
    run(capsys, python=python, args=["--tp-size", "8"], cache_dir=str(cache))
    assert run(capsys, python=python, args=["--tp-size", "4"], cache_dir=str(cache))["cached"] is False
    assert (
        run(capsys, python=python, args=["--tp-size", "8"], cache_dir=str(cache), expected_version="0.5.23")[
            "cached"
        ]
        is False
    )
    cfg = venv / "pyvenv.cfg"
    cfg.unlink()
    cfg.write_text("home = /usr/bin\n")  # a new venv at the same place: a new inode
    os.utime(cfg, ns=(1, 1))
    assert run(capsys, python=python, args=["--tp-size", "8"], cache_dir=str(cache))["cached"] is False
    assert len(parser_calls) == 4


def test_a_rejected_check_and_check_mode_leave_no_stamp(venv, parser_calls, tmp_path, capsys) -> None:
    cache = tmp_path / "cache"
    python = str(venv / "bin" / "python")
    rejected = run(capsys, python=python, args=["--bad"], cache_dir=str(cache))
    assert rejected["failed"] and not rejected["accepted"]
    checked = run(
        capsys, python=python, args=["--tp-size", "8"], cache_dir=str(cache), _ansible_check_mode=True
    )
    assert checked["accepted"] and not cache.exists()
    assert run(capsys, python=python, args=["--bad"], cache_dir=str(cache))["failed"]
    assert len(parser_calls) == 3


def test_without_cache_dir_every_check_builds_the_parser(venv, parser_calls, capsys) -> None:
    for _ in range(2):
        assert run(capsys, python=str(venv / "bin" / "python"), args=["--tp-size", "8"])["cached"] is False
    assert len(parser_calls) == 2


def test_the_key_names_the_release_not_the_system_python() -> None:
    a = check_cache_key("/opt/sglang/releases/a/venv/bin/python", (1, 2), ["--x"], "0.5.23")
    assert a == check_cache_key("/opt/sglang/releases/a/venv/bin/python", (1, 2), ["--x"], "0.5.23")
    assert a != check_cache_key("/opt/sglang/releases/b/venv/bin/python", (1, 2), ["--x"], "0.5.23")
    assert a != check_cache_key("/opt/sglang/releases/a/venv/bin/python", (1, 3), ["--x"], "0.5.23")
    assert a != check_cache_key("/opt/sglang/releases/a/venv/bin/python", (1, 2), ["--x", "1"], "0.5.23")
    assert a != check_cache_key("/opt/sglang/releases/a/venv/bin/python", (1, 2), ["--x"], None)
