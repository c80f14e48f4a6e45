"""module_utils/nvidia_smi.py: parsing nvidia-smi output into GPU facts.

Inputs are the real H200 capture (tests/fixtures/nvidia-smi/h200-sm90/) and what the lab stand-in prints for
the sm120 / sm100 / sm90 fixtures, plus hand-made broken output for every error path.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.nvidia_smi import (
    QUERY_ARGS,
    QUERY_FIELDS,
    TOPOLOGY_ARGS,
    GpuFactsError,
    GpuInfo,
    arch_from_compute_cap,
    check_topology_matches,
    parse_query_csv,
    parse_topology,
    summarize,
)
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests" / "fixtures" / "nvidia-smi" / "h200-sm90"
STANDIN = ROOT / "lab" / "gpu-standin" / "nvidia-smi"
FIXTURES = ROOT / "lab" / "gpu-standin" / "fixtures"

H200 = "0, NVIDIA H200, 9.0, 143771, 580.159.04, 00000000:00:06.0\n"


def standin(fixture: str, *args: str) -> str:
    """What the lab stand-in prints for these arguments with this fixture."""
    env = {**os.environ, "GLM5_LAB_GPU_FIXTURE": str(FIXTURES / f"{fixture}.json")}
    result = subprocess.run(
        [sys.executable, str(STANDIN), *args], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout


def gpu(
    index: int, compute_cap: str = "9.0", driver: str = "580.159.04", name: str = "NVIDIA H200"
) -> GpuInfo:
    return {
        "index": index,
        "name": name,
        "compute_cap": compute_cap,
        "memory_mib": 143771,
        "driver_version": driver,
        "pci_bus_id": f"00000000:{index + 16:02X}:00.0",
    }


# --- the real capture ------------------------------------------------------------------------------------


def test_parses_the_real_h200_query() -> None:
    text = (CAPTURE / "query_gpu_noheader_nounits.csv").read_text()
    gpus = parse_query_csv(text, fields=(*QUERY_FIELDS, "uuid"))
    assert gpus == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "compute_cap": "9.0",
            "memory_mib": 143771,
            "driver_version": "580.159.04",
            "pci_bus_id": "00000000:00:06.0",
        }
    ]
    assert summarize(gpus) == {
        "gpus": gpus,
        "arch": "sm90",
        "compute_cap": "9.0",
        "count": 1,
        "driver_version": "580.159.04",
        "names": ["NVIDIA H200"],
        "memory_mib_min": 143771,
    }


def test_the_real_header_csv_is_refused_with_a_hint() -> None:
    text = (CAPTURE / "query_gpu_header_units.csv").read_text()
    with pytest.raises(GpuFactsError, match="CSV header; query with --format=csv,noheader,nounits"):
        parse_query_csv(text)


def test_parses_the_real_h200_topology() -> None:
    topology = parse_topology((CAPTURE / "topo.txt").read_text())
    assert topology == {"gpus": ["GPU0"], "links": [["X"]], "link_types": [], "nvlink": False}


# --- stand-in output for the lab fixtures ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "arch", "name", "memory", "nvlink", "link_types"),
    [
        (
            "sm120",
            "sm120",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            97887,
            False,
            ["NODE", "PIX", "SYS"],
        ),
        ("sm100", "sm100", "NVIDIA B200", 183359, True, ["NV18"]),
        ("sm90", "sm90", "NVIDIA H200", 143771, True, ["NV18"]),
    ],
)
def test_parses_standin_output(
    fixture: str, arch: str, name: str, memory: int, nvlink: bool, link_types: list[str]
) -> None:
    facts = summarize(parse_query_csv(standin(fixture, *QUERY_ARGS)))
    assert facts["arch"] == arch
    assert facts["count"] == 8
    assert facts["names"] == [name]
    assert facts["memory_mib_min"] == memory
    assert facts["driver_version"] == "580.159.04"
    assert [g["index"] for g in facts["gpus"]] == list(range(8))
    assert len({g["pci_bus_id"] for g in facts["gpus"]}) == 8
    topology = parse_topology(standin(fixture, *TOPOLOGY_ARGS))
    assert topology["gpus"] == [f"GPU{i}" for i in range(8)]
    assert topology["nvlink"] is nvlink
    assert topology["link_types"] == link_types
    assert all(topology["links"][i][i] == "X" for i in range(8))
    check_topology_matches(facts, topology)


def test_topology_skips_nic_rows_and_columns() -> None:
    topology = parse_topology(standin("sm90", *TOPOLOGY_ARGS))
    assert all(len(row) == 8 for row in topology["links"])
    assert "PIX" not in topology["link_types"]


def test_pcie_topology_matrix_is_read_cell_by_cell() -> None:
    links = parse_topology(standin("sm120", *TOPOLOGY_ARGS))["links"]
    assert links[0][:4] == ["X", "PIX", "NODE", "NODE"]
    assert links[0][4:] == ["SYS"] * 4
    assert links[7][6] == "PIX"


def test_topology_survives_tabs_expanded_to_spaces() -> None:
    text = standin("sm100", *TOPOLOGY_ARGS).expandtabs()
    assert parse_topology(text)["nvlink"] is True


# --- arch names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("compute_cap", "arch"),
    [
        ("12.0", "sm120"),
        ("9.0", "sm90"),
        ("10.0", "sm100"),
        ("12.1", "sm121"),
        ("8.6", "sm86"),
        (" 8.9 ", "sm89"),
    ],
)
def test_arch_from_compute_cap(compute_cap: str, arch: str) -> None:
    assert arch_from_compute_cap(compute_cap) == arch


@pytest.mark.parametrize("compute_cap", ["", "12", "12.10", "x.y", "sm90", "9.0.1", "[N/A]", "\u0669.\u0660"])
def test_arch_from_compute_cap_refuses_garbage(compute_cap: str) -> None:
    with pytest.raises(GpuFactsError, match=r"not MAJOR\.MINOR"):
        arch_from_compute_cap(compute_cap)


# --- query errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n", "   \n\n  \n"])
def test_empty_output_is_an_error(text: str) -> None:
    with pytest.raises(GpuFactsError, match="listed no GPUs"):
        parse_query_csv(text)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("0, NVIDIA H200, 9.0, 143771, 580.159.04", "expected 6 fields"),
        ("0, NVIDIA H200, 9.0, 143771, 580.159.04, 00000000:00:06.0, extra", "expected 6 fields"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            "expected 6 fields",
        ),
        (
            "zero, NVIDIA H200, 9.0, 143771, 580.159.04, 00000000:00:06.0",
            "index 'zero' is not a whole number",
        ),
        ("-1, NVIDIA H200, 9.0, 143771, 580.159.04, 00000000:00:06.0", "is not a whole number"),
        ("0, , 9.0, 143771, 580.159.04, 00000000:00:06.0", "name is empty"),
        ("0, NVIDIA H200, [N/A], 143771, 580.159.04, 00000000:00:06.0", "compute_cap '\\[N/A\\]'"),
        ("0, NVIDIA H200, 9.0, 143771 MiB, 580.159.04, 00000000:00:06.0", "was 'nounits' left out"),
        ("0, NVIDIA H200, 9.0, [N/A], 580.159.04, 00000000:00:06.0", "memory.total '\\[N/A\\]'"),
        ("0, NVIDIA H200, 9.0, 1.5, 580.159.04, 00000000:00:06.0", "not a whole number of MiB"),
        ("0, NVIDIA H200, 9.0, 143771, latest, 00000000:00:06.0", "driver_version 'latest'"),
        ("0, NVIDIA H200, 9.0, 143771, 580.159.04, 06.0", "not a PCI address"),
        ("index, name, compute_cap, memory.total, driver_version, pci.bus_id", "CSV header"),
    ],
)
def test_malformed_lines_name_the_line_and_the_problem(line: str, problem: str) -> None:
    with pytest.raises(GpuFactsError, match=problem) as error:
        parse_query_csv(H200 + line + "\n")
    assert "line 2" in str(error.value)


def test_duplicate_index_is_an_error() -> None:
    with pytest.raises(GpuFactsError, match="GPU index 0 appears twice"):
        parse_query_csv(H200 + H200)


def test_fields_must_include_the_ones_the_facts_need() -> None:
    with pytest.raises(GpuFactsError, match=r"must ask for pci\.bus_id"):
        parse_query_csv(H200, fields=QUERY_FIELDS[:-1])


def test_blank_lines_and_crlf_are_tolerated() -> None:
    gpus = parse_query_csv("\r\n" + H200.replace("\n", "\r\n") + "\n")
    assert [g["index"] for g in gpus] == [0]


# --- summary errors --------------------------------------------------------------------------------------


def test_summary_sorts_gpus_by_index() -> None:
    facts = summarize([gpu(1), gpu(0)])
    assert [g["index"] for g in facts["gpus"]] == [0, 1]


def test_summary_of_nothing_is_an_error() -> None:
    with pytest.raises(GpuFactsError, match="no GPUs"):
        summarize([])


def test_mixed_architectures_name_each_arch_and_its_gpus() -> None:
    gpus = [gpu(0), gpu(1), gpu(2, "12.0", name="NVIDIA RTX PRO 6000 Blackwell Server Edition")]
    with pytest.raises(GpuFactsError, match="mixed GPU architectures") as error:
        summarize(gpus)
    assert "sm90 on GPU 0, 1; sm120 on GPU 2" in str(error.value)


def test_mixed_drivers_name_each_driver_and_its_gpus() -> None:
    with pytest.raises(GpuFactsError, match="mixed driver versions") as error:
        summarize([gpu(0), gpu(1, driver="575.57.08")])
    assert "580.159.04 on GPU 0; 575.57.08 on GPU 1" in str(error.value)


def test_memory_min_is_the_smallest_gpu() -> None:
    small = {**gpu(1), "memory_mib": 80000}
    assert summarize([gpu(0), small])["memory_mib_min"] == 80000


# --- topology errors -------------------------------------------------------------------------------------

TWO_GPUS = (
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\t0-15\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-15\t0\t\tN/A\n"
    "\nLegend:\n"
)


def test_two_gpus_over_nvlink() -> None:
    assert parse_topology(TWO_GPUS) == {
        "gpus": ["GPU0", "GPU1"],
        "links": [["X", "NV18"], ["NV18", "X"]],
        "link_types": ["NV18"],
        "nvlink": True,
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no matrix"),
        (" \n\t\n", "no matrix"),
        ("\tNIC0\tCPU Affinity\nNIC0\t X \n", "no GPU columns"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", "no matrix"),
        (TWO_GPUS.replace("GPU1\tNV18\t X \t0-15\t0\t\tN/A\n", ""), "a GPU1 column but no GPU1 row"),
        (
            TWO_GPUS.replace("GPU1\tNV18\t X \t0-15\t0\t\tN/A", "GPU1\tNV18"),
            "row GPU1 has 1 cells, expected 2",
        ),
        (TWO_GPUS.replace("GPU0\t X \tNV18", "GPU0\tNV18\tNV18"), "does not show X"),
        (TWO_GPUS.replace("GPU0\tGPU1\tCPU", "GPU1\tGPU0\tCPU"), "out of order"),
        (TWO_GPUS.replace("\nLegend", "GPU2\tSYS\tSYS\nLegend"), "rows without columns: GPU2"),
    ],
)
def test_broken_topology_is_an_error(text: str, problem: str) -> None:
    with pytest.raises(GpuFactsError, match=problem):
        parse_topology(text)


def test_topology_must_count_the_same_gpus_as_the_query() -> None:
    facts = summarize([gpu(0)])
    with pytest.raises(GpuFactsError, match="lists 1 GPU\\(s\\) but topo -m shows 2"):
        check_topology_matches(facts, parse_topology(TWO_GPUS))


# --- anything else nvidia-smi could print ----------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    ["0", "7", "-1", "NVIDIA H200", "9.0", "12.0", "1.5", "143771", "143771 MiB", "[N/A]", "580.159.04", "",
     "00000000:00:06.0", "GPU0", "GPU1", "NIC0", " X ", "NV18", "PIX", "SYS", "CPU Affinity", "\x1b[4m",
     "\x1b[0m", "\t\x1b[4mGPU0"]
)  # fmt: skip


@st.composite
def nvidia_smi_like(draw: st.DrawFn) -> str:
    """Lines of real-looking cells, joined the ways nvidia-smi joins them."""
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        cells = draw(st.lists(FRAGMENTS | st.text(max_size=12), max_size=9))
        lines.append(draw(st.sampled_from([", ", ",", "\t"])).join(cells))
    return draw(st.sampled_from(["\n", "\r\n"])).join(lines)


def _parses_or_refuses(text: str) -> None:
    for parse in (parse_query_csv, parse_topology):
        with contextlib.suppress(GpuFactsError):
            parse(text)
    with contextlib.suppress(GpuFactsError):
        summarize(parse_query_csv(text))


@settings(max_examples=500)
@given(st.text())
def test_arbitrary_text_parses_or_raises_gpu_facts_error(text: str) -> None:
    _parses_or_refuses(text)


@settings(max_examples=500)
@given(nvidia_smi_like())
def test_nvidia_smi_like_text_parses_or_raises_gpu_facts_error(text: str) -> None:
    _parses_or_refuses(text)


@given(st.text(max_size=8))
def test_arbitrary_compute_cap_maps_or_raises_gpu_facts_error(text: str) -> None:
    with contextlib.suppress(GpuFactsError):
        assert arch_from_compute_cap(text).startswith("sm")


@given(
    st.lists(
        st.tuples(
            st.integers(0, 99),
            st.integers(1, 10**9),
            st.sampled_from(["9.0", "10.0", "12.0"]),
        ),
        min_size=1,
        max_size=8,
        unique_by=lambda t: t[0],
    )
)
def test_well_formed_lines_round_trip(rows: list[tuple[int, int, str]]) -> None:
    text = "".join(f"{i}, NVIDIA X, {cc}, {mem}, 580.159.04, 00000000:{i:02X}:00.0\n" for i, mem, cc in rows)
    gpus = parse_query_csv(text)
    assert [(g["index"], g["memory_mib"], g["compute_cap"]) for g in gpus] == rows
