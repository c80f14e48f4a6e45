"""Fixtures for the real-parser check: cached per-version sglang venvs (tests/parser_check/parser_venvs.py).

The first run builds them (about a minute, 400 MB over the lab engine's venv, which it builds when missing);
later runs reuse them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "parser_check"))

import parser_venvs


@pytest.fixture(scope="session")
def parser_python() -> Callable[[str], str]:
    """version -> the python of a venv with that sglang installed (built once, then cached)."""
    built: dict[str, str] = {}

    def get(version: str) -> str:
        if version not in built:
            built[version] = str(parser_venvs.ensure_version(version))
        return built[version]

    return get


@pytest.fixture(scope="session")
def runner() -> parser_venvs.Runner:
    return parser_venvs.subprocess_runner
