"""Release planning for the sglang_runtime role (plugins/module_utils/sglang_release.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import load_lanes
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_release import (
    SglangReleaseError,
    canonical_name,
    constraint_lines,
    constraints_text,
    normalize_requirement,
    override_packages,
    parse_requirement,
    pip_check_problems,
    pip_environment,
    pip_source_args,
    plan_release,
    python_abi,
    python_problem,
    read_requirements,
    release_hash,
    release_name,
    releases_to_prune,
)
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
LAB_REQUIREMENTS = ROOT / "lab" / "engine" / "requirements-cpu-0.5.23.txt"
sys.path.insert(0, str(ROOT / "plugins" / "filter"))
from sglang import FilterModule  # noqa: E402

FILTERS = FilterModule().filters()
LANES = load_lanes()
WHEELHOUSE = "http://lab-gateway:8080/wheels/sglang-0.5.23-cpu/"

# `pip check` in the lab engine venv (sglang 0.5.23 installed --no-deps), 2026-11-29, shortened.
LAB_PIP_CHECK = """\
sglang 0.5.23 requires cuda-python, which is not installed.
sglang 0.5.23 requires flashinfer-python, which is not installed.
sglang 0.5.23 requires sglang-kernel, which is not installed.
sglang 0.5.23 requires torchaudio, which is not installed.
sglang 0.5.23 has requirement apache-tvm-ffi==0.1.11, but you have apache-tvm-ffi 0.1.15.post2.
"""


def _plan(lane: str = "current", **overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "python_version": "3.11.2",
        "interpreter": "/usr/bin/python3",
        "root": "/opt/sglang",
        "packages": [f"sglang=={LANES[lane]['sglang_version']}"],
    }
    args.update(overrides)
    return plan_release(lane, LANES[lane], **args)


# ------------------------------------------------------------------------------------------------------------
# Requirements
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "parts"),
    [
        ("torch==2.14.1", ("torch", "", "==2.14.1", "")),
        ("flashinfer_python[cu13] == 0.7.2", ("flashinfer_python", "[cu13]", "==0.7.2", "")),
        ("numpy>=1.26, <3", ("numpy", "", ">=1.26,<3", "")),
        ("uvloop==0.21 ; sys_platform != 'win32'", ("uvloop", "", "==0.21", "; sys_platform != 'win32'")),
        ("packaging", ("packaging", "", "", "")),
    ],
)
def test_parse_requirement(line: str, parts: tuple[str, str, str, str]) -> None:
    assert parse_requirement(line) == parts


@pytest.mark.parametrize("line", ["", "-r other.txt", "torch @ https://x/torch.whl", "==1.0", "a b"])
def test_unreadable_requirements_are_refused(line: str) -> None:
    with pytest.raises(SglangReleaseError, match="cannot read package requirement"):
        parse_requirement(line)


def test_names_and_spellings_are_normalized() -> None:
    assert canonical_name("Flashinfer_Python") == canonical_name("flashinfer-python") == "flashinfer-python"
    assert normalize_requirement("Flashinfer_Python[cu13] == 0.7.2") == "flashinfer-python[cu13]==0.7.2"


def test_lab_requirements_split_into_resolver_and_no_deps_sets() -> None:
    packages, no_deps = read_requirements(LAB_REQUIREMENTS.read_text(encoding="utf-8"))
    assert no_deps == ["sglang==0.5.23"]
    assert len(packages) == 148
    assert {"torch==2.14.1", "pip==26.3", "transformers==5.19.0", "datasets==5.2.0"} <= set(packages)
    assert all("#" not in p and "==" in p for p in packages)


def test_requirements_with_pip_options_are_refused() -> None:
    with pytest.raises(SglangReleaseError, match=r"line 2 .* is a pip option"):
        read_requirements("torch==2.14.1\n--hash sha256:00\n")


# ------------------------------------------------------------------------------------------------------------
# Constraints
# ------------------------------------------------------------------------------------------------------------


def test_current_lane_constraints_drop_extras() -> None:
    assert constraint_lines(LANES["current"]) == [
        "flashinfer_python==0.7.2",
        "sgl-deep-gemm==0.2.3.post2",
        "sglang-kernel==0.4.10",
        "torch==2.14.1",
        "transformers==5.19.0",
    ]


def test_seed_lane_override_is_left_out_of_the_constraints_and_installed_no_deps() -> None:
    assert override_packages(LANES["seed"]) == ["transformers==5.2.0"]
    lines = constraint_lines(LANES["seed"])
    assert "torch==2.9.1" in lines
    assert not any(line.startswith("transformers") for line in lines)
    text = constraints_text("seed", LANES["seed"])
    assert "# Installed afterwards with --no-deps (lane overrides): transformers==5.2.0" in text
    assert _plan("seed")["no_deps_packages"] == ["transformers==5.2.0"]


def test_extra_constraints_come_last_under_their_own_heading() -> None:
    text = constraints_text("current", LANES["current"], ["urllib3==2.8.0"])
    lines = text.splitlines()
    assert lines[0] == "# Constraints of sglang lane current (sglang 0.5.23)."
    assert lines[-2:] == ["# Site constraints (sglang_runtime_extra_constraints)", "urllib3==2.8.0"]
    assert text.endswith("\n")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["urllib3"], "has no version"),
        (["Torch==2.14.0"], "already set by the lane's pins"),
        (["urllib3==2.8.0", "urllib3<3"], "already set by sglang_runtime_extra_constraints"),
    ],
)
def test_bad_extra_constraints_are_refused(extra: list[str], message: str) -> None:
    with pytest.raises(SglangReleaseError, match=message):
        constraint_lines(LANES["current"], extra)


def test_an_override_without_a_pin_is_refused() -> None:
    with pytest.raises(SglangReleaseError, match="no pin"):
        override_packages({"pins": {"torch": "1"}, "overrides": {"transformers": "why"}})


# ------------------------------------------------------------------------------------------------------------
# Python
# ------------------------------------------------------------------------------------------------------------


def test_python_abi() -> None:
    assert python_abi("3.11.2") == "3.11"
    assert python_abi("3.12") == "3.12"
    with pytest.raises(SglangReleaseError, match="cannot read Python version"):
        python_abi("Python 3.11")


def test_python_check_names_the_variable_and_the_range() -> None:
    assert python_problem("3.11.2", "current", LANES["current"], "/usr/bin/python3") == ""
    assert python_problem("3.10.12", "seed", LANES["seed"], "/usr/bin/python3") == ""
    message = python_problem("3.10.12", "current", LANES["current"], "/usr/bin/python3")
    assert "/usr/bin/python3 is Python 3.10.12" in message
    assert "needs Python >=3.11" in message
    assert "sglang_runtime_python" in message


def test_plan_reports_host_problems_instead_of_raising() -> None:
    assert _plan()["problems"] == []
    assert "sglang_runtime_python" in _plan(python_version="3.10.12")["problems"][0]
    pre_seed = _plan("pre_seed", python_version="3.10.12")["problems"]
    assert pre_seed and "not deployable" in pre_seed[0]


# ------------------------------------------------------------------------------------------------------------
# Naming
# ------------------------------------------------------------------------------------------------------------


def test_release_name_is_version_and_twelve_hex_digits() -> None:
    plan = _plan()
    assert plan["name"] == f"0.5.23-{plan['hash']}"
    assert len(plan["hash"]) == 12 and int(plan["hash"], 16) >= 0
    assert plan["dir"] == f"/opt/sglang/releases/{plan['name']}"
    assert plan["python"] == f"/opt/sglang/releases/{plan['name']}/venv/bin/python"
    with pytest.raises(SglangReleaseError, match="hex digits"):
        release_name("0.5.23", "XYZ")


def test_hash_ignores_order_spelling_and_python_micro() -> None:
    base = release_hash(["sglang==0.5.23", "torch==2.14.1"], [], ["torch==2.14.1"], "3.11.2")
    assert base == release_hash(["Torch == 2.14.1", "sglang==0.5.23"], [], ["torch==2.14.1"], "3.11.9")


@pytest.mark.parametrize(
    "change",
    [
        {"packages": ["sglang==0.5.23", "torch==2.14.0"]},
        {"no_deps": ["transformers==5.19.0"]},
        {"constraints": ["torch==2.14.1", "urllib3==2.8.0"]},
        {"python": "3.12.1"},
    ],
)
def test_hash_changes_with_what_ends_up_in_the_venv(change: dict[str, Any]) -> None:
    args: dict[str, Any] = {
        "packages": ["sglang==0.5.23", "torch==2.14.1"],
        "no_deps": [],
        "constraints": ["torch==2.14.1"],
        "python": "3.11.2",
    }
    before = release_hash(*args.values())
    args.update(change)
    assert release_hash(*args.values()) != before


def test_name_does_not_depend_on_where_the_wheels_come_from() -> None:
    names = {
        _plan(wheelhouse=WHEELHOUSE)["name"],
        _plan(wheelhouse="/srv/wheels")["name"],
        _plan(torch_index="https://download.pytorch.org/whl/cu130")["name"],
        _plan(torch_index="https://mirror.example/whl/cu130", root="/srv/sglang")["name"],
    }
    assert len(names) == 1


def test_extra_constraints_make_another_release() -> None:
    assert _plan()["name"] != _plan(extra_constraints=["urllib3==2.8.0"])["name"]


# ------------------------------------------------------------------------------------------------------------
# The package lists
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("packages", "message"),
    [
        (["torch==2.14.1"], "neither sglang_runtime_packages nor"),
        (["sglang==0.5.22"], "lane current is sglang 0.5.23"),
        (["sglang>=0.5.23"], "lane current is sglang 0.5.23"),
    ],
)
def test_the_lists_must_install_the_lanes_sglang(packages: list[str], message: str) -> None:
    with pytest.raises(SglangReleaseError, match=message):
        _plan(packages=packages)


def test_a_package_in_both_lists_is_refused() -> None:
    with pytest.raises(SglangReleaseError, match="transformers listed both"):
        _plan("seed", packages=["sglang==0.5.9", "transformers==4.57.1"])


def test_lab_plan_bootstraps_the_tools_then_installs_the_rest() -> None:
    packages, no_deps = read_requirements(LAB_REQUIREMENTS.read_text(encoding="utf-8"))
    plan = _plan(packages=packages, no_deps_packages=no_deps, wheelhouse=WHEELHOUSE)
    assert sorted(plan["bootstrap"]) == [
        "packaging==26.4",
        "pip==26.3",
        "setuptools==84.2.1",
        "wheel==0.48.0",
    ]
    assert len(plan["packages"]) == 144
    assert not set(plan["bootstrap"]) & set(plan["packages"])
    assert plan["no_deps_packages"] == ["sglang==0.5.23"]
    argv = plan["bootstrap_argv"]
    assert argv[:4] == [plan["python"], "-m", "pip", "install"]
    assert argv[-4:] == plan["bootstrap"]


def test_online_plan_adds_packaging_for_the_pip_module() -> None:
    plan = _plan()
    assert plan["bootstrap"] == ["packaging"]
    assert plan["packages"] == ["sglang==0.5.23"]


# ------------------------------------------------------------------------------------------------------------
# pip arguments
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("wheelhouse", "torch_index", "expected"),
    [
        (WHEELHOUSE, None, ["--no-index", "--find-links", WHEELHOUSE, "--trusted-host", "lab-gateway"]),
        (
            "https://wheels.example/sglang/",
            None,
            ["--no-index", "--find-links", "https://wheels.example/sglang/"],
        ),
        ("http://127.0.0.1:8080/w/", None, ["--no-index", "--find-links", "http://127.0.0.1:8080/w/"]),
        ("/srv/wheelhouse", "https://x/cu130", ["--no-index", "--find-links", "/srv/wheelhouse"]),
        ("file:///srv/wheelhouse", None, ["--no-index", "--find-links", "file:///srv/wheelhouse"]),
        (
            "",
            "https://download.pytorch.org/whl/cu129",
            ["--extra-index-url", "https://download.pytorch.org/whl/cu129"],
        ),
        (None, None, []),
    ],
)
def test_pip_source_args(wheelhouse: str | None, torch_index: str | None, expected: list[str]) -> None:
    assert pip_source_args(wheelhouse, torch_index) == expected


@pytest.mark.parametrize(
    ("wheelhouse", "torch_index"), [("ftp://mirror/wheels", None), (None, "/srv/torch-index")]
)
def test_unusable_sources_are_refused(wheelhouse: str | None, torch_index: str | None) -> None:
    with pytest.raises(SglangReleaseError, match="sglang_runtime_"):
        pip_source_args(wheelhouse, torch_index)


def test_offline_plan_pip_arguments() -> None:
    plan = _plan(wheelhouse=WHEELHOUSE)
    args = shlex.split(plan["pip_args"])
    assert args[:5] == ["--no-index", "--find-links", WHEELHOUSE, "--trusted-host", "lab-gateway"]
    assert args[-3:] == ["--constraint", f"{plan['dir']}/constraints.txt", "--no-compile"]
    assert "--no-cache-dir" in args
    assert shlex.split(plan["pip_args_no_deps"]) == [*args, "--no-deps"]
    assert plan["offline"] is True
    assert plan["pip_environment"]["PIP_CONFIG_FILE"] == "/dev/null"


def test_online_plan_pip_arguments_keep_the_sites_pip_configuration() -> None:
    plan = _plan("seed", torch_index="https://download.pytorch.org/whl/cu129")
    assert shlex.split(plan["pip_args"])[:2] == [
        "--extra-index-url",
        "https://download.pytorch.org/whl/cu129",
    ]
    assert "--no-index" not in plan["pip_args"]
    assert "PIP_CONFIG_FILE" not in plan["pip_environment"]
    assert pip_environment(False)["PIP_DISABLE_PIP_VERSION_CHECK"] == "1"


# ------------------------------------------------------------------------------------------------------------
# pip check
# ------------------------------------------------------------------------------------------------------------


def test_pip_check_allows_the_no_deps_packages_own_requirements() -> None:
    assert pip_check_problems(LAB_PIP_CHECK, ["sglang==0.5.23"]) == []
    assert pip_check_problems("No broken requirements found.\n", []) == []


def test_pip_check_reports_everything_else() -> None:
    output = LAB_PIP_CHECK + "aiohttp 3.14.5 requires yarl, which is not installed.\n"
    assert pip_check_problems(output, ["sglang==0.5.23"]) == [
        "aiohttp 3.14.5 requires yarl, which is not installed."
    ]
    assert len(pip_check_problems(LAB_PIP_CHECK, [])) == 5


def test_pip_check_allows_an_override_that_breaks_another_pin() -> None:
    output = "sglang 0.5.9 has requirement transformers==4.57.1, but you have transformers 5.2.0.\n"
    assert pip_check_problems(output, ["transformers==5.2.0"]) == []
    assert pip_check_problems(output, []) == [output.strip()]


@given(st.text())
def test_pip_check_never_fails_on_odd_output(output: str) -> None:
    problems = pip_check_problems(output, ["sglang==0.5.23"])
    assert all(line.strip() == line and line for line in problems)


# ------------------------------------------------------------------------------------------------------------
# Pruning
# ------------------------------------------------------------------------------------------------------------


def test_prune_keeps_the_newest() -> None:
    releases = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 5.0}
    assert releases_to_prune(releases, 3, []) == ["a", "b"]


def test_prune_never_removes_current_or_previous() -> None:
    releases = {"old-current": 1.0, "previous": 2.0, "newer": 3.0, "newest": 4.0}
    assert releases_to_prune(releases, 2, ["old-current", "previous"]) == ["newer", "newest"]
    assert releases_to_prune(releases, 1, ["old-current", "previous"]) == ["newer", "newest"]
    assert releases_to_prune(releases, 3, ["old-current", "previous"]) == ["newer"]


def test_prune_ignores_protected_names_that_are_not_releases() -> None:
    assert releases_to_prune({"a": 1.0, "b": 2.0}, 1, ["", "gone"]) == ["a"]


def test_prune_refuses_to_keep_nothing() -> None:
    with pytest.raises(SglangReleaseError, match="keep at least 1"):
        releases_to_prune({"a": 1.0}, 0, [])


@given(
    st.dictionaries(st.text(min_size=1, max_size=8), st.floats(0, 1e10), max_size=12),
    st.integers(1, 6),
    st.lists(st.text(min_size=1, max_size=8), max_size=3),
)
def test_prune_properties(releases: dict[str, float], keep: int, protected: list[str]) -> None:
    doomed = releases_to_prune(releases, keep, protected)
    kept = set(releases) - set(doomed)
    assert set(doomed) <= set(releases)
    assert not set(doomed) & set(protected)
    assert len(kept) >= min(keep, len(releases))
    if doomed:
        assert len(kept) == max(keep, len(set(protected) & set(releases)))
        for name in kept - set(protected):
            assert all(releases[name] >= releases[gone] for gone in doomed)


# ------------------------------------------------------------------------------------------------------------
# Filters
# ------------------------------------------------------------------------------------------------------------


def test_sglang_lane_filter() -> None:
    lane = FILTERS["sglang_lane"]("current")
    assert lane["name"] == "current"
    assert lane["sglang_version"] == "0.5.23"
    assert lane["cuda"] == "13.0"
    with pytest.raises(AnsibleFilterError, match="'nightly' is not a lane"):
        FILTERS["sglang_lane"]("nightly")


def test_release_plan_filter_wraps_errors() -> None:
    plan = FILTERS["sglang_release_plan"](
        "current", python_version="3.11.2", interpreter="/usr/bin/python3", root="/opt/sglang",
        packages=["sglang==0.5.23"], wheelhouse=WHEELHOUSE,
    )  # fmt: skip
    assert plan["name"] == _plan()["name"]
    with pytest.raises(AnsibleFilterError, match=r"sglang_release_plan: .*lane current is sglang 0\.5\.23"):
        FILTERS["sglang_release_plan"](
            "current", python_version="3.11.2", interpreter="/usr/bin/python3", root="/opt/sglang",
            packages=["sglang==0.5.9"],
        )  # fmt: skip


def test_requirements_filter() -> None:
    text = "# comment\ntorch==2.14.1\n\nsglang==0.5.23  # no-deps\n"
    assert FILTERS["sglang_requirements"](text) == ["torch==2.14.1"]
    assert FILTERS["sglang_requirements"](text, no_deps=True) == ["sglang==0.5.23"]


def test_prune_filter_takes_find_results_and_link_targets() -> None:
    found = [
        {"path": "/opt/sglang/releases/0.5.21-000000000000", "mtime": 1.0},
        {"path": "/opt/sglang/releases/0.5.23-aaaaaaaaaaaa", "mtime": 2.0},
        {"path": "/opt/sglang/releases/0.5.23-bbbbbbbbbbbb", "mtime": 3.0},
        {"path": "/opt/sglang/releases/0.5.22-ffffffffffff", "mtime": 4.0},
    ]
    protected = ["0.5.23-aaaaaaaaaaaa", "/opt/sglang/releases/0.5.23-aaaaaaaaaaaa", "", None]
    protected.append("/opt/sglang/releases/0.5.23-bbbbbbbbbbbb")
    assert FILTERS["sglang_releases_to_prune"](found, 2, protected) == [
        "/opt/sglang/releases/0.5.21-000000000000",
        "/opt/sglang/releases/0.5.22-ffffffffffff",
    ]
    assert FILTERS["sglang_releases_to_prune"](found, 3, protected) == [
        "/opt/sglang/releases/0.5.21-000000000000"
    ]
    assert FILTERS["sglang_pip_check_problems"](LAB_PIP_CHECK, ["sglang==0.5.23"]) == []


def test_pip_source_environment_mirrors_the_source_arguments() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.sglang_release import pip_source_environment

    assert pip_source_environment("http://lab-gateway:8080/wheels/smg-1.13.0/") == {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": "http://lab-gateway:8080/wheels/smg-1.13.0/",
        "PIP_TRUSTED_HOST": "lab-gateway",
    }
    assert pip_source_environment("/srv/wheels") == {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/srv/wheels"}
    assert pip_source_environment("") == {}


# ------------------------------------------------------------------------------------------------------------
# Verification by import (pip installs with --no-compile)
# ------------------------------------------------------------------------------------------------------------


def test_the_packages_install_without_byte_code_and_the_bootstrap_with_it() -> None:
    plan = _plan(wheelhouse=WHEELHOUSE)
    assert "--no-compile" in shlex.split(plan["pip_args"])
    assert "--no-compile" in shlex.split(plan["pip_args_no_deps"])
    assert "--no-compile" not in plan["bootstrap_argv"]


def test_import_argv_runs_the_releases_python_with_the_modules_in_order() -> None:
    modules = ["sglang.launch_server", "sglang.srt.models.registry"]
    plan = _plan(import_modules=modules)
    assert plan["import_argv"][:2] == [f"{plan['venv']}/bin/python", "-c"]
    assert plan["import_argv"][3:] == modules
    assert _plan()["import_argv"][3:] == []
    assert plan["version_line"] == f"sglang version: {plan['version']}"


@pytest.mark.parametrize("module", ["", "sglang..x", "sglang.x-y", "-c", "os;import x", "1sglang", "a b"])
def test_a_module_that_is_not_a_dotted_name_is_refused(module: str) -> None:
    with pytest.raises(SglangReleaseError, match="sglang_runtime_import_modules"):
        _plan(import_modules=["sglang.launch_server", module])


def _run_import_script(tmp_path: Path, modules: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="", PYTHONPYCACHEPREFIX="")
    argv = _plan(import_modules=modules)["import_argv"]
    return subprocess.run(
        [sys.executable, *argv[1:]], env=env, capture_output=True, text=True, check=False, cwd=tmp_path
    )


def test_the_import_script_writes_the_byte_code_of_what_it_imports(tmp_path: Path) -> None:
    package = tmp_path / "sglang"
    (package / "srt").mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '0.5.23'\n", encoding="utf-8")
    (package / "srt" / "__init__.py").write_text("", encoding="utf-8")
    (package / "srt" / "server.py").write_text("import sglang.srt.helper\n", encoding="utf-8")
    (package / "srt" / "helper.py").write_text("", encoding="utf-8")
    (package / "srt" / "unused.py").write_text("", encoding="utf-8")
    done = _run_import_script(tmp_path, ["sglang.srt.server"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["sglang version: 0.5.23"]
    cached = sorted(p.name.split(".")[0] for p in tmp_path.rglob("*.pyc"))
    assert cached == ["__init__", "__init__", "helper", "server"]
    broken = _run_import_script(tmp_path, ["sglang.srt.server", "sglang.srt.missing"])
    assert broken.returncode != 0
    assert "No module named 'sglang.srt.missing'" in broken.stderr
