"""The benchmark report: records from sglang's serving benchmark become a table and two plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.bench_report import (
    BenchReportError,
    bench_command,
    bench_target,
    markdown_table,
    parse_records,
    plot_report,
    report_markdown,
    scrub,
    series,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    SglangFlagError,
    bench_module,
    load_lanes,
)


def record(concurrency: int, **extra: float) -> dict:
    """A record with the fields sglang 0.5.23's benchmark/serving.py writes (a subset)."""
    base = {
        "backend": "sglang",
        "dataset_name": "random-ids",
        "max_concurrency": concurrency,
        "completed": 4 * concurrency,
        "request_throughput": 0.5 * concurrency,
        "output_throughput": 8.0 * concurrency,
        "median_ttft_ms": 100.0 + concurrency,
        "p99_ttft_ms": 200.0 + concurrency,
        "median_tpot_ms": 20.0,
        "p99_tpot_ms": 40.0,
        "median_e2e_latency_ms": 400.0,
        "server_info": {"version": "0.5.23"},
    }
    return base | extra


def jsonl(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def test_records_are_sorted_by_concurrency_across_files() -> None:
    records = parse_records([jsonl(record(4)), jsonl(record(1)) + "\n", jsonl(record(2))])
    assert [r["max_concurrency"] for r in records] == [1, 2, 4]


@pytest.mark.parametrize(
    ("texts", "words"),
    [
        ([""], "no benchmark records"),
        (["not json\n"], "line 1 is not JSON"),
        ([jsonl({"max_concurrency": 1})], "lacks completed"),
        ([jsonl(record(1, median_ttft_ms=None))], "lacks median_ttft_ms"),
    ],
)
def test_bad_output_is_refused_with_the_reason(texts: list[str], words: str) -> None:
    with pytest.raises(BenchReportError, match=words):
        parse_records(texts)


def test_the_table_has_a_row_per_level_and_dashes_for_missing_values() -> None:
    table = markdown_table([record(1), record(2, p99_tpot_ms=None)]).splitlines()
    assert table[0].startswith("| concurrency | requests | req/s | output tok/s | TTFT p50 ms")
    assert table[2] == "| 1 | 4 | 0.50 | 8.0 | 101.0 | 201.0 | 20.00 | 40.00 | 400.0 |"
    assert table[3].split(" | ")[7] == "-"


def test_series_skip_levels_without_the_value() -> None:
    assert series([record(1), record(2, p99_ttft_ms=None), record(4)], "p99_ttft_ms") == (
        [1, 4],
        [201.0, 204.0],
    )


def test_report_names_target_and_plots() -> None:
    text = report_markdown(
        [record(1)], {"target": "http://lab-gateway:30000", "sglang_version": "0.5.23"}, ["a.png"]
    )
    assert text.startswith("# Serving benchmark: http://lab-gateway:30000\n")
    assert "- sglang: 0.5.23" in text and "![a.png](a.png)" in text


def test_plots_are_png_files(tmp_path: Path) -> None:
    names = plot_report([record(1), record(2), record(4)], str(tmp_path), "lab")
    assert names == ["throughput.png", "latency.png"]
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


URL = "http://r:30000"
SETTINGS = {"dataset": "random-ids", "input_len": 64, "output_len": 16, "range_ratio": 1.0, "prompts": 8}


def test_bench_command_sends_at_least_four_prompts_per_concurrent_request() -> None:
    argv = bench_command("0.5.23", "/py", URL, "/m", "/w/c8.jsonl", 8, SETTINGS)
    assert argv[:3] == ["/py", "-m", "sglang.benchmark.serving"]
    flags = {f: argv[i + 1] for i, f in enumerate(argv) if f.startswith("--") and f != "--disable-tqdm"}
    assert flags["--num-prompts"] == "32" and flags["--max-concurrency"] == "8"
    assert flags["--base-url"] == URL and flags["--output-file"] == "/w/c8.jsonl"
    assert flags["--random-input-len"] == "64" and flags["--seed"] == "42"
    assert "--disable-tqdm" in argv
    one = bench_command("0.5.23", "/py", "u", "t", "o", 1, SETTINGS)
    assert one[one.index("--num-prompts") + 1] == "8"


@pytest.mark.parametrize(("key", "value"), [("input_len", 0), ("prompts", -1)])
def test_bench_command_refuses_empty_runs(key: str, value: int) -> None:
    with pytest.raises(BenchReportError, match=key):
        bench_command("0.5.23", "/py", "u", "t", "o", 1, SETTINGS | {key: value})
    with pytest.raises(BenchReportError, match="concurrency"):
        bench_command("0.5.23", "/py", "u", "t", "o", 0, SETTINGS)


def test_every_lane_names_its_benchmark_module() -> None:
    modules = {lane["sglang_version"]: bench_module(lane["sglang_version"]) for lane in load_lanes().values()}
    assert modules["0.5.23"] == "sglang.benchmark.serving"
    assert modules["0.5.9"] == "sglang.bench_serving"
    assert bench_command("0.5.9", "/py", URL, "/m", "/o", 1, SETTINGS)[:3] == [
        "/py",
        "-m",
        "sglang.bench_serving",
    ]
    with pytest.raises(SglangFlagError, match="no bench_module"):
        bench_module("0.5.23", {"0.5.23": {}})


def test_a_real_record_from_the_lab_reads_and_tabulates() -> None:
    """One level of sglang 0.5.23's benchmark through the lab router (backend sglang, random-ids 64/16)."""
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-bench" / "lab-router-c2.jsonl"
    records = parse_records([fixture.read_text(encoding="utf-8")])
    assert len(records) == 1 and records[0]["max_concurrency"] == 2 and records[0]["backend"] == "sglang"
    row = markdown_table(records).splitlines()[-1]
    assert row.startswith("| 2 | 8 |"), row


def test_bench_target_prefers_the_given_url_then_the_router_then_the_node() -> None:
    local = "http://gpu-node-1:30000"
    assert bench_target("http://gpu-node-2:30000/", "lab-gateway", 30000, local) == "http://gpu-node-2:30000"
    assert bench_target("", "lab-gateway", "30001", local) == "http://lab-gateway:30001"
    assert bench_target("", "", 30000, local) == local
    assert bench_target("", "lab-gateway", 30000, local, True) == "https://lab-gateway:30000"


SERVER_INFO = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-bench" / "server-info-node.json"
SERVER_KEY = "an-example-server-key-long-enough"  # what the fixture's api_key was replaced with


def test_a_record_keeps_no_key_from_the_servers_own_server_info() -> None:
    """A real /server_info of a lab node (sglang 0.5.23, what the benchmark stores in each record when it
    measures a node directly, as tune.yml does): the api_key goes, the settings a report reads stay."""
    info = json.loads(SERVER_INFO.read_text(encoding="utf-8"))
    assert info["api_key"] == SERVER_KEY  # the fixture holds the key where sglang puts it
    clean = scrub(record(1, server_info=info))
    assert SERVER_KEY not in json.dumps(clean)
    assert clean["server_info"]["api_key"] == "<hidden>"
    kept = clean["server_info"]
    assert (kept["tokenizer_path"], kept["max_total_tokens"], kept["version"]) == (
        info["tokenizer_path"],
        info["max_total_tokens"],
        info["version"],
    )
    assert kept["admin_api_key"] is None and kept["ssl_keyfile_password"] is None  # nothing to hide
    assert clean["completed"] == 4  # the measurements are untouched
    # sglang rebuilds a launch command from the settings: the key is in it, --config or not.
    assert "--api-key an-example" in info["launch_command"]
    assert "--api-key <hidden> --attention-backend" in kept["launch_command"]


def test_a_known_secret_is_hidden_wherever_it_appears() -> None:
    """A key quoted in a launch command, a list, or under a name that does not say it is a key."""
    quoted = record(
        2, server_info={"argv": ["--api-key", "s3cr3t-value-xyz"], "cmd": "x --api-key s3cr3t-value-xyz"}
    )
    clean = scrub(quoted, ["s3cr3t-value-xyz", ""])
    assert "s3cr3t-value-xyz" not in json.dumps(clean)
    assert clean["server_info"]["cmd"] == "x --api-key <hidden>"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("admin_api_key", True),
        ("hf_token", True),
        ("ssl_keyfile_password", True),
        ("token", True),
        ("total_input_tokens", False),
        ("max_total_tokens", False),
        ("tokenizer_path", False),
        ("completed", False),
    ],
)
def test_which_names_are_secrets(name: str, secret: bool) -> None:
    assert (scrub({name: "v"})[name] == "<hidden>") is secret


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("sglang serve --api-key k1 --port 1", "sglang serve --api-key <hidden> --port 1"),
        ("x --admin-api-key=k2", "x --admin-api-key=<hidden>"),
        ("x --hf-token k3", "x --hf-token <hidden>"),
        ("x --api-key --port 1", "x --api-key --port 1"),  # no value given: nothing to hide
        ("x --max-total-tokens 2048", "x --max-total-tokens 2048"),
    ],
)
def test_secret_flags_in_a_command_line_are_hidden(line: str, shown: str) -> None:
    assert scrub({"launch_command": line})["launch_command"] == shown
