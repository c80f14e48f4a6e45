"""Verify the runtime scenario: releases A and B built and verified, current back on A, old ones pruned."""

from __future__ import annotations

import json

import pytest

ROOT = "/opt/sglang"
VERSION = "0.5.23"
LANE_PINS = [
    "flashinfer_python==0.7.2",
    "sgl-deep-gemm==0.2.3.post2",
    "sglang-kernel==0.4.10",
    "torch==2.14.1",
    "transformers==5.19.0",
]


def _target(host, link: str) -> str:
    assert host.file(link).is_symlink, f"{link} is not a symlink"
    return host.file(link).linked_to


@pytest.fixture()
def releases(host) -> dict[str, str]:
    """{'a': dir, 'b': dir}: A is current (switched back), B is previous."""
    return {"a": _target(host, f"{ROOT}/current"), "b": _target(host, f"{ROOT}/previous")}


def _constraints(host, release: str) -> list[str]:
    text = host.file(f"{release}/constraints.txt").content_string
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_exactly_the_two_releases_remain(host, releases) -> None:
    listed = sorted(host.check_output(f"ls {ROOT}/releases").split())
    assert listed == sorted(path.rsplit("/", 1)[-1] for path in releases.values())
    assert releases["a"] != releases["b"]
    for path in releases.values():
        assert path.rsplit("/", 1)[-1].startswith(f"{VERSION}-")


@pytest.mark.parametrize("which", ["a", "b"])
def test_release_has_a_verified_venv(host, releases, which: str) -> None:
    release = releases[which]
    assert host.file(f"{release}/venv/bin/python").exists
    marker = host.file(f"{release}/.verified")
    assert marker.is_file
    assert f"sglang version: {VERSION}" in marker.content_string
    manifest = json.loads(host.file(f"{release}/release.json").content_string)
    assert manifest["lane"] == "current"
    assert manifest["sglang_version"] == VERSION
    assert manifest["no_deps_packages"] == [f"sglang=={VERSION}"]
    assert manifest["name"] == release.rsplit("/", 1)[-1]


# Modules a server start loads, sglang's and a dependency's (sglang_runtime_import_modules imports them).
SERVER_MODULES = [
    "sglang/srt/managers/scheduler",
    "sglang/srt/entrypoints/http_server",
    "torch/nn/modules/linear",
]


def test_the_release_holds_the_byte_code_of_the_servers_modules_and_not_the_rest(host, releases) -> None:
    """pip installed --no-compile; verification imported the server's modules as root: their byte-code only.

    Release B was never run by a server or by these tests: what it holds is what its build wrote.
    """
    site = host.check_output(f"ls -d {releases['b']}/venv/lib/python3*/site-packages").strip()
    tag = site.split("/lib/python", 1)[1].split("/", 1)[0].replace(".", "")  # 3.11 -> 311
    for module in SERVER_MODULES:
        directory, name = module.rsplit("/", 1)
        assert host.file(f"{site}/{directory}/__pycache__/{name}.cpython-{tag}.pyc").is_file, module
    # sglang's own test helpers: nothing imports them, and pip compiled nothing.
    assert host.check_output(f"find {site}/sglang/test -name '*.pyc' | wc -l").strip() == "0"


def test_constraints_are_the_lane_pins(host, releases) -> None:
    assert _constraints(host, releases["a"]) == LANE_PINS
    assert _constraints(host, releases["b"]) == [*LANE_PINS, "urllib3==2.8.0"]
    header = host.file(f"{releases['a']}/constraints.txt").content_string
    assert "# Constraints of sglang lane current (sglang 0.5.23)." in header


def test_a_was_not_rebuilt_after_b(host, releases) -> None:
    built_a = host.file(f"{releases['a']}/.verified").mtime
    built_b = host.file(f"{releases['b']}/.verified").mtime
    assert built_a < built_b


def test_current_imports_sglang(host) -> None:
    out = host.check_output(f"{ROOT}/current/venv/bin/python -c 'import sglang; print(sglang.__version__)'")
    assert out.strip().splitlines()[-1] == VERSION


def test_current_runs_sglang_version(host) -> None:
    assert f"sglang version: {VERSION}" in host.check_output(f"{ROOT}/current/venv/bin/sglang version")


def test_installed_offline_from_the_wheelhouse(host, releases) -> None:
    freeze = host.check_output(f"{releases['a']}/venv/bin/python -m pip list --format=freeze").splitlines()
    assert f"sglang=={VERSION}" in freeze
    assert "torch==2.14.1" in freeze
    assert "pip==26.3" in freeze
    # Nothing was left behind by pip outside the releases.
    assert not host.file("/root/.cache/pip").exists
