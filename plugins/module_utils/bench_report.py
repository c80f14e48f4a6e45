"""Runs and reports of sglang's serving benchmark (``python -m sglang.benchmark.serving --output-file x``).

Each benchmark run appends one JSON object per concurrency level to its JSONL file (sglang 0.5.23
``benchmark/serving.py``: max_concurrency, completed, request/output throughput, TTFT/TPOT/E2E latency
percentiles in ms, ...). These pure functions turn those records into rows, a Markdown table and the series
the plots draw. The plotting itself (matplotlib) is ``plot_report``, the only function that writes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import bench_module

# (column title, record key, format): what the table shows, in this order.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("concurrency", "max_concurrency", "{:d}"),
    ("requests", "completed", "{:d}"),
    ("req/s", "request_throughput", "{:.2f}"),
    ("output tok/s", "output_throughput", "{:.1f}"),
    ("TTFT p50 ms", "median_ttft_ms", "{:.1f}"),
    ("TTFT p99 ms", "p99_ttft_ms", "{:.1f}"),
    ("TPOT p50 ms", "median_tpot_ms", "{:.2f}"),
    ("TPOT p99 ms", "p99_tpot_ms", "{:.2f}"),
    ("E2E p50 ms", "median_e2e_latency_ms", "{:.1f}"),
)
REQUIRED = ("max_concurrency", "completed", "request_throughput", "output_throughput", "median_ttft_ms")


# sglang's native /generate (the router routes it too). Not sglang-oai: its /v1/completions requests carry
# best_of=1 with stream=true, which the router (smg 1.13) refuses: "best_of is not supported when stream is
# enabled" (seen in the lab). The real-parser tests check the flags and this backend against each lane's
# wheel.
BACKEND = "sglang"


# What a saved record must not hold. sglang's benchmark stores the server's /server_info in every record, and
# it carries the server's launch settings: api_key, admin_api_key, and any token or password it was given.
HIDDEN = "<hidden>"
_SECRET_NAMES = frozenset({"token", "password", "secret", "passwd"})
_SECRET_SUFFIXES = ("api_key", "_token", "_password", "_secret")
# The value of a secret flag in a command line: sglang's /server_info also carries its launch_command, rebuilt
# from the settings, so a key given in a --config file is back in clear text there.
_SECRET_FLAG = re.compile(r"(--[A-Za-z0-9-]*(?:api-key|token|password|secret)(?:=|\s+))(?!-)\S+")


def is_secret_name(name: object) -> bool:
    """Whether a record's key names a secret (api_key, admin_api_key, hf_token, ...); counts of tokens
    (total_input_tokens) are not."""
    lowered = str(name).lower()
    return lowered in _SECRET_NAMES or lowered.endswith(_SECRET_SUFFIXES)


def scrub(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``value`` (a record, or any JSON value) with the secrets hidden: the value of every key that
    names a secret (:func:`is_secret_name`; empty values are left as they are), every occurrence of one of
    ``secrets`` in any string, and the value of a secret flag (``--api-key x``) in a command line such as the
    ``launch_command`` that /server_info carries."""
    known = sorted({str(s) for s in secrets if s}, key=len, reverse=True)

    def walk(item: Any) -> Any:
        if isinstance(item, Mapping):
            return {
                key: HIDDEN if is_secret_name(key) and item[key] not in (None, "") else walk(item[key])
                for key in item
            }
        if isinstance(item, list):
            return [walk(element) for element in item]
        if isinstance(item, str):
            for secret in known:
                item = item.replace(secret, HIDDEN)
            item = _SECRET_FLAG.sub(rf"\g<1>{HIDDEN}", item)
        return item

    return walk(value)


class BenchReportError(ValueError):
    """Benchmark output that cannot be reported."""


def bench_target(
    url: str, router_host: str, router_port: int | str, local_url: str, router_tls: bool = False
) -> str:
    """The base URL to benchmark: ``url`` when given, else the router when there is one (``router_host``
    not empty; https when it speaks TLS), else the client node's own server (``local_url``)."""
    if str(url or "").strip():
        return str(url).strip().rstrip("/")
    if str(router_host or "").strip():
        scheme = "https" if router_tls else "http"
        return f"{scheme}://{str(router_host).strip()}:{int(router_port)}"
    return str(local_url)


def bench_command(
    sglang_version: str,
    python: str,
    base_url: str,
    tokenizer: str,
    output_file: str,
    concurrency: int,
    settings: Mapping[str, Any],
) -> list[str]:
    """The argv of one run of sglang ``sglang_version``'s serving benchmark at one concurrency level (its
    module from lanes.yml: dialects, bench_module).

    ``settings``: dataset, input_len, output_len, range_ratio, prompts (at least 4 per concurrent request are
    sent, so that every level reaches its concurrency), seed.
    """
    if int(concurrency) < 1:
        raise BenchReportError(f"concurrency must be at least 1, got {concurrency!r}")
    for key in ("input_len", "output_len", "prompts"):
        if int(settings[key]) < 1:
            raise BenchReportError(f"{key} must be at least 1, got {settings[key]!r}")
    prompts = max(int(settings["prompts"]), 4 * int(concurrency))
    return [
        python, "-m", bench_module(sglang_version),
        "--backend", BACKEND,
        "--base-url", base_url,
        "--tokenizer", tokenizer,
        "--dataset-name", str(settings["dataset"]),
        "--random-input-len", str(int(settings["input_len"])),
        "--random-output-len", str(int(settings["output_len"])),
        "--random-range-ratio", str(float(settings["range_ratio"])),
        "--num-prompts", str(prompts),
        "--max-concurrency", str(int(concurrency)),
        "--seed", str(int(settings.get("seed", 42))),
        "--disable-tqdm",
        "--output-file", output_file,
    ]  # fmt: skip


def parse_records(texts: Iterable[str]) -> list[dict[str, Any]]:
    """Every JSON record of the JSONL texts, sorted by concurrency; blank lines are skipped."""
    records: list[dict[str, Any]] = []
    for text in texts:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise BenchReportError(f"line {number} is not JSON: {exc}") from exc
            missing = [key for key in REQUIRED if record.get(key) is None]
            if missing:
                raise BenchReportError(f"line {number} lacks {', '.join(missing)}")
            records.append(record)
    if not records:
        raise BenchReportError("no benchmark records: did the benchmark run?")
    return sorted(records, key=lambda r: int(r["max_concurrency"]))


def _cell(record: Mapping[str, Any], key: str, fmt: str) -> str:
    value = record.get(key)
    if value is None:
        return "-"
    return fmt.format(int(value) if fmt.endswith("d}") else float(value))


def markdown_table(records: Sequence[Mapping[str, Any]]) -> str:
    """One row per concurrency level."""
    head = "| " + " | ".join(column[0] for column in COLUMNS) + " |"
    rule = "|" + "|".join(["---:"] * len(COLUMNS)) + "|"
    rows = ["| " + " | ".join(_cell(r, key, fmt) for _title, key, fmt in COLUMNS) + " |" for r in records]
    return "\n".join([head, rule, *rows])


def series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(concurrency levels, values of ``key``) for a plot; levels without the value are left out."""
    xs, ys = [], []
    for record in records:
        if record.get(key) is not None:
            xs.append(int(record["max_concurrency"]))
            ys.append(float(record[key]))
    return xs, ys


def report_markdown(
    records: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], plots: Sequence[str]
) -> str:
    """The report: what was measured, against what, the table and the plots."""
    lines = [
        f"# Serving benchmark: {meta.get('target', '?')}",
        "",
        f"- date: {meta.get('date', '?')}",
        f"- client: {meta.get('client', '?')} running `{meta.get('command', 'sglang.benchmark.serving')}`",
        f"- sglang: {meta.get('sglang_version', '?')}, profile {meta.get('profile', '?')}",
        f"- dataset: {meta.get('dataset', '?')}, input {meta.get('input_len', '?')} tokens, "
        f"output {meta.get('output_len', '?')} tokens, {meta.get('prompts', '?')} prompts per level",
    ]
    if meta.get("note"):
        lines.append(f"- note: {meta['note']}")
    lines += ["", markdown_table(records), ""]
    lines += [f"![{name}]({name})" for name in plots]
    return "\n".join(lines) + "\n"


def plot_report(records: Sequence[Mapping[str, Any]], directory: str, title: str) -> list[str]:
    """Throughput and latency against concurrency as PNGs in ``directory``; returns their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    throughput = (("output tok/s", "output_throughput"), ("req/s", "request_throughput"))
    latency = (
        ("TTFT p50", "median_ttft_ms"),
        ("TTFT p99", "p99_ttft_ms"),
        ("TPOT p50", "median_tpot_ms"),
        ("E2E p50", "median_e2e_latency_ms"),
    )
    figures = (("throughput.png", "throughput", throughput), ("latency.png", "latency (ms)", latency))
    for name, ylabel, lines in figures:
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
        for label, key in lines:
            xs, ys = series(records, key)
            if xs:
                ax.plot(xs, ys, marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency (max in flight)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(f"{directory}/{name}")
        plt.close(fig)
        made.append(name)
    return made
