"""The real-parser check: rendered flags against the argparse parser of the real sglang wheel of each lane.

Needs the parser venvs (built on first use under ~/.cache/glm5-deploy/parser-venvs) and so PyPI once.
No GPU: the parser is built and parse_args is called, nothing more (see sglang_parser_check.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import parser_venvs
import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    DATA_DIR,
    load_dialects,
    load_lanes,
    load_profiles,
    render_sglang_args,
    resolve_profile,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_parser_check import (
    run_parser_check,
    run_parser_checks,
)

MODEL = ["--model-path", "/models/glm-5"]
SEED_SIX = [
    "--nsa-prefill-backend",
    "trtllm",
    "--nsa-decode-backend",
    "trtllm",
    "--fp8-gemm-backend",
    "cutlass",
    "--attention-backend",
    "flashinfer",
    "--moe-runner-backend",
    "flashinfer_cutlass",
    "--disable-cuda-graph",
]
MISSPELLED = ["--enable-metircs"]  # not a prefix of any flag, so argparse's allow_abbrev cannot save it
VERSIONS = sorted({str(lane["sglang_version"]) for lane in load_lanes().values()})


def _profile_cases() -> list[tuple[str, str, str, list[str]]]:
    """(case id, version, label, argv) for every profile x lane variant, and for each of its layouts."""
    cases = []
    lanes = load_lanes()
    for arch, doc in sorted(load_profiles().items()):
        for lane in sorted(doc["lanes"]):
            for layout in ["", *sorted(doc["lanes"][lane].get("layouts") or {})]:
                profile = resolve_profile(load_profiles(), arch, lane, lanes=lanes, layout=layout or None)
                version = profile["sglang_version"]
                argv = [*MODEL, *render_sglang_args(profile["settings"], version)]
                suffix = f"-{layout}" if layout else ""
                label = f"{arch}/{lane}" + (f" layout {layout}" if layout else "")
                cases.append((f"{arch}-{lane}{suffix}", version, label, argv))
    return cases


PROFILE_CASES = _profile_cases()


@pytest.fixture(scope="session")
def cli_tables() -> dict[str, dict[str, Any]]:
    """Each version's flag table as its real parser gives it (extract_cli.py), read by ``parsed``'s runs."""
    return {}


@pytest.fixture(scope="session")
def parsed(
    parser_python: Callable[[str], str], runner: Any, cli_tables: dict[str, dict[str, Any]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """Every check of this file, run with one interpreter start per sglang version, which also reads that
    version's flag table into ``cli_tables``."""
    plan: dict[str, dict[str, list[str]]] = {v: {} for v in VERSIONS}
    for case_id, version, _, argv in PROFILE_CASES:
        plan[version][case_id] = argv
    for version in VERSIONS:
        plan[version]["seed-six"] = [*MODEL, *SEED_SIX]
        plan[version]["misspelled"] = [*MODEL, "--tp-size", "8", *MISSPELLED]
        plan[version]["model-only"] = list(MODEL)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for version, checks in plan.items():
        names = sorted(checks)
        tables: dict[str, dict[str, Any]] = {}
        results = run_parser_checks(
            parser_python(version), [checks[n] for n in names], parser_venvs.extracting_runner(runner, tables)
        )
        cli_tables[version] = tables[parser_python(version)]
        for name, result in zip(names, results, strict=True):
            assert result["sglang_version"] == version
            out[(version, name)] = result
    return out


@pytest.mark.parametrize(
    ("case_id", "version", "label", "argv"), PROFILE_CASES, ids=[c[0] for c in PROFILE_CASES]
)
def test_every_profile_lane_is_accepted(
    parsed: dict[tuple[str, str], dict[str, Any]], case_id: str, version: str, label: str, argv: list[str]
) -> None:
    result = parsed[(version, case_id)]
    assert result["ok"], f"sglang {version} rejects {label}: {result['error']}\nargs: {' '.join(argv)}"


@pytest.mark.parametrize("version", VERSIONS)
def test_misspelled_flag_is_rejected(parsed: dict[tuple[str, str], dict[str, Any]], version: str) -> None:
    result = parsed[(version, "misspelled")]
    assert not result["ok"]
    assert "unrecognized arguments: --enable-metircs" in result["error"]


def test_lane_proof_seed_flags(parsed: dict[tuple[str, str], dict[str, Any]]) -> None:
    """0.5.8.post1 rejects the seed flags (no trtllm), 0.5.9 accepts them, 0.5.23 no longer knows --nsa-*."""
    before = parsed[("0.5.8.post1", "seed-six")]
    assert not before["ok"]
    assert "invalid choice: 'trtllm'" in before["error"]

    seed = parsed[("0.5.9", "seed-six")]
    assert seed["ok"], seed["error"]
    values = seed["values"]
    assert values["nsa_prefill_backend"] == "trtllm" and values["nsa_decode_backend"] == "trtllm"
    assert values["disable_cuda_graph"] is True
    assert values["moe_runner_backend"] == "flashinfer_cutlass"

    current = parsed[("0.5.23", "seed-six")]
    assert not current["ok"]
    assert "unrecognized arguments: --nsa-prefill-backend" in current["error"]


def _parsed_value(version: str, values: dict[str, Any], flag: str) -> Any:
    """The parsed value of flag, found through its argparse dest in the version's flag table."""
    return values.get(load_dialects()[version]["flags"][flag]["dest"])


def test_seed_lane_profile_parses_to_the_seed_values(parsed: dict[tuple[str, str], dict[str, Any]]) -> None:
    values = parsed[("0.5.9", "sm120-seed")]["values"]
    expected = {
        "--nsa-prefill-backend": "trtllm",
        "--nsa-decode-backend": "trtllm",
        "--fp8-gemm-backend": "cutlass",
        "--attention-backend": "flashinfer",
        "--moe-runner-backend": "flashinfer_cutlass",
        "--disable-cuda-graph": True,
        "--kv-cache-dtype": "fp8_e4m3",
        "--tp-size": 8,
    }
    assert {flag: _parsed_value("0.5.9", values, flag) for flag in expected} == expected


def test_the_tp4pp2_layout_parses_to_pr_26928s_layout(parsed: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Issue 39 item 2: sm120/current in the tp4pp2 layout parses with 0.5.23's real parser to TP4 PP2."""
    values = parsed[("0.5.23", "sm120-current-tp4pp2")]["values"]
    expected = {"--tp-size": 4, "--pp-size": 2, "--disable-shared-experts-fusion": True}
    assert {flag: _parsed_value("0.5.23", values, flag) for flag in expected} == expected


def test_current_lane_sm120_parses_to_its_profile(parsed: dict[tuple[str, str], dict[str, Any]]) -> None:
    values = parsed[("0.5.23", "sm120-current")]["values"]
    expected = {
        "--dsa-prefill-backend": "flashinfer_sparse_mla",
        "--dsa-decode-backend": "flashinfer_sparse_mla",
        "--cuda-graph-backend-decode": "disabled",
        "--cuda-graph-backend-prefill": "disabled",
        "--cuda-graph-max-bs-decode": 256,
        "--attention-backend": "dsa",
        "--kv-cache-dtype": "fp8_e4m3",
        "--fp8-gemm-backend": "cutlass",
        "--disable-cuda-graph": None,  # left at its default
    }
    assert {flag: _parsed_value("0.5.23", values, flag) for flag in expected} == expected


def test_run_parser_check_messages(parser_python: Callable[[str], str], runner: Any) -> None:
    ok, message = run_parser_check(parser_python("0.5.23"), [*MODEL, "--tp-size", "8"], runner)
    assert ok and message.startswith("sglang 0.5.23 accepts")
    ok, message = run_parser_check(parser_python("0.5.23"), [*MODEL, *MISSPELLED], runner)
    assert not ok and "sglang 0.5.23 rejects the rendered flags" in message and "--enable-metircs" in message


def test_run_parser_check_without_sglang(runner: Any) -> None:
    import sys

    ok, message = run_parser_check(sys.executable, MODEL, runner)  # the project venv has no sglang
    assert not ok and "could not build the parser" in message and "sglang" in message


@pytest.mark.parametrize("version", VERSIONS)
def test_generated_flag_table_is_current(
    parsed: dict[tuple[str, str], dict[str, Any]], cli_tables: dict[str, dict[str, Any]], version: str
) -> None:
    """plugins/data/sglang_cli/<version>.json is what the real parser says (regenerate if not)."""
    fresh = cli_tables[version]
    stored = json.loads((DATA_DIR / "sglang_cli" / f"{version}.json").read_text(encoding="utf-8"))
    assert fresh == stored, f"run: .venv/bin/python tests/parser_check/parser_venvs.py regenerate {version}"
    assert load_dialects()[version]["flags"] == stored["flags"]


def _bench_cli(python: str, module: str) -> tuple[set[str], dict[str, list[str]]]:
    """The long flags the bench module's source defines (add_argument) and the literal choices of each.

    Read from the wheel's source with ast: importing the module needs its serving dependencies (datasets,
    aiohttp), which the parser venvs leave out."""
    import ast
    import subprocess
    from pathlib import Path

    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    path = Path(purelib, *module.split(".")).with_suffix(".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    # NAME = {"key": ...} at module level: choices=list(NAME.keys()) (the backends) lists these keys.
    tables = {
        target.id: [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    flags: set[str] = set()
    choices: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        flags.update(names)
        for keyword in (k for k in node.keywords if k.arg == "choices"):
            if isinstance(keyword.value, ast.List | ast.Tuple):
                values = [e.value for e in keyword.value.elts if isinstance(e, ast.Constant)]
            else:  # list(NAME.keys())
                source = [n.id for n in ast.walk(keyword.value) if isinstance(n, ast.Name) and n.id in tables]
                values = tables[source[0]] if source else []
            choices.update(dict.fromkeys(names, values))
    return flags, choices


@pytest.mark.parametrize("version", VERSIONS)
def test_bench_flags_exist_in_each_lanes_benchmark(parser_python: Callable[[str], str], version: str) -> None:
    """Every flag playbooks/bench.yml passes (bench_command) is one the lane's benchmark module defines."""
    from ansible_collections.glm5.deploy.plugins.module_utils.bench_report import BACKEND, bench_command
    from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import bench_module

    module = bench_module(version)
    settings = {"dataset": "random-ids", "input_len": 8, "output_len": 8, "range_ratio": 1.0, "prompts": 1}
    argv = bench_command(version, "python", "http://h:1", "/t", "/o", 1, settings)
    flags, choices = _bench_cli(parser_python(version), module)
    assert len(flags) > 20, f"{module} of sglang {version}: found only {sorted(flags)}"
    used = [a for a in argv if a.startswith("--")]
    assert not [f for f in used if f not in flags], f"{module} of sglang {version} lacks these flags"
    assert BACKEND in choices.get("--backend", []), choices.get("--backend")
    assert "random-ids" in choices.get("--dataset-name", []), choices.get("--dataset-name")


def _sglang_source(python: str, relative: str) -> str:
    """A file of the sglang package installed for ``python`` (its parser venv)."""
    found = subprocess.run(
        [python, "-c", "import importlib.util as u; print(u.find_spec('sglang').origin)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return (Path(found.stdout.strip()).parent / relative).read_text()


@pytest.mark.parametrize(
    "lane", sorted(name for name, lane in load_lanes().items() if lane.get("nan_fail_stop")), ids=str
)
def test_each_lanes_nan_fail_stop_is_in_its_real_sglang(
    lane: str, parser_python: Callable[[str], str]
) -> None:
    """Issue 40: the NaN fail-stop each lane renders is what that release's real source does. The seed lane's
    tripwire line is the sampler's own log line (a logger call in srt/layers/sampler.py, so the tripwire that
    follows the journal sees it); the current lane's variable is an environment switch of that release and its
    journal pattern the message of its NaN assert."""
    spec = load_lanes()[lane]["nan_fail_stop"]
    version = str(load_lanes()[lane]["sglang_version"])
    python = parser_python(version)
    if spec.get("tripwire"):
        sampler = _sglang_source(python, "srt/layers/sampler.py")
        assert f'logger.warning("{spec["tripwire"]}")' in sampler, spec["tripwire"]
        assert spec["journal_pattern"] in spec["tripwire"]
        assert "enable_nan_detection" in sampler
    environment = spec.get("environment") or {}
    if environment:
        environ = _sglang_source(python, "srt/environ.py")
        for name, entry in environment.items():
            # Each variable is one of that release's switches, and the value turns it the other way.
            default = {"1": "False", "0": "True"}[str(entry["value"])]
            assert f"    {name} = EnvBool({default})" in environ, name
        probe = _sglang_source(python, "srt/utils/async_probe.py")
        assert 'message = f"NaN detected! {msg}"' in probe
        sampler = _sglang_source(python, "srt/layers/sampler.py")
        assert 'maybe_detect_nan(logits, "sampler: next_token_logits")' in sampler
        assert spec["journal_pattern"] == "NaN detected! sampler"
