"""lab/gpu-standin/nvidia-smi: the lab's nvidia-smi test double prints what real nvidia-smi prints.

With the h200-1gpu fixture its output must equal the real H200 capture (tests/fixtures/nvidia-smi/h200-sm90/)
byte for byte; the other fixtures must describe the GPUs the lab fleet pretends to have.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "tests" / "fixtures" / "nvidia-smi" / "h200-sm90"
STANDIN = ROOT / "lab" / "gpu-standin" / "nvidia-smi"
FIXTURES = ROOT / "lab" / "gpu-standin" / "fixtures"
ALL_FIXTURES = sorted(path.stem for path in FIXTURES.glob("*.json"))
CAPTURED_AT = "Sun Nov 29 21:14:44 2026"
QUERY = "index,name,compute_cap,memory.total,driver_version,pci.bus_id"


def run(
    fixture: str | Path, *args: str, timestamp: str | None = CAPTURED_AT, state: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run the stand-in with a fixture (a name in lab/gpu-standin/fixtures, or a path).

    `state` points the stand-in at the files its stand-in driver packages write; by default at none.
    """
    path = fixture if isinstance(fixture, Path) else FIXTURES / f"{fixture}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLM5_LAB_")}
    env["GLM5_LAB_GPU_FIXTURE"] = str(path)
    env["GLM5_LAB_DRIVER_VERSION_FILE"] = "/nonexistent/driver-version"
    env["GLM5_LAB_PERSISTENCE_FILE"] = "/nonexistent/persistence-mode"
    env.update(state or {})
    if timestamp is not None:
        env["GLM5_LAB_GPU_TIMESTAMP"] = timestamp
    return subprocess.run([sys.executable, str(STANDIN), *args], env=env, capture_output=True, check=False)


def stdout(fixture: str | Path, *args: str) -> str:
    result = run(fixture, *args)
    assert result.returncode == 0, result
    return result.stdout.decode()


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def matrix_part(topo: str) -> str:
    return topo.split("\nLegend:")[0]


# --- byte for byte against the real H200 ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "captured"),
    [
        ((f"--query-gpu={QUERY},uuid", "--format=csv,noheader,nounits"), "query_gpu_noheader_nounits.csv"),
        ((f"--query-gpu={QUERY}", "--format=csv"), "query_gpu_header_units.csv"),
        (
            ("--query-gpu", f"{QUERY},uuid", "--format", "csv,noheader,nounits"),
            "query_gpu_noheader_nounits.csv",
        ),
        (("--format", "csv", "--query-gpu", QUERY), "query_gpu_header_units.csv"),
        (("-L",), "nvidia-smi-L.txt"),
        (("--list-gpus",), "nvidia-smi-L.txt"),
        (("--version",), "version.txt"),
        (("topo", "-m"), "topo.txt"),
        ((), "nvidia-smi.txt"),
    ],
)
def test_h200_output_equals_the_real_capture(args: tuple[str, ...], captured: str) -> None:
    result = run("h200-1gpu", *args)
    assert result.returncode == 0
    assert result.stderr == b""
    assert result.stdout == (CAPTURE / captured).read_bytes()


def test_plain_output_without_a_frozen_clock_differs_only_in_the_date_line() -> None:
    result = run("h200-1gpu", timestamp=None)
    first, rest = result.stdout.decode().split("\n", 1)
    assert rest == (CAPTURE / "nvidia-smi.txt").read_text().split("\n", 1)[1]
    # time.asctime() then 7 spaces, as on the real date line ("Sun Nov 29 21:14:44 2026       ").
    assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} {7}", first)


def test_xml_has_the_real_shape_and_values() -> None:
    # The XML was captured one second after the table.
    text = run("h200-1gpu", "-q", "-x", timestamp="Sun Nov 29 21:14:45 2026").stdout.decode()
    ours = ET.fromstring(text)
    real = ET.fromstring((CAPTURE / "nvidia-smi-q.xml").read_bytes())

    def paths(element: ET.Element, prefix: str = "") -> set[str]:
        here = f"{prefix}/{element.tag}"
        return {here}.union(*(paths(child, here) for child in element))

    assert paths(ours) <= paths(real)
    for path in (
        "timestamp",
        "driver_version",
        "cuda_version",
        "attached_gpus",
        "gpu/product_name",
        "gpu/uuid",
        "gpu/vbios_version",
        "gpu/pci/pci_bus_id",
        "gpu/fb_memory_usage/total",
        "gpu/fb_memory_usage/free",
        "gpu/temperature/gpu_temp",
        "gpu/gpu_power_readings/instant_power_draw",
        "gpu/gpu_power_readings/current_power_limit",
    ):
        assert ours.findtext(path) == real.findtext(path), path
    assert ours.find("gpu").get("id") == real.find("gpu").get("id")  # type: ignore[union-attr]
    real_text = (CAPTURE / "nvidia-smi-q.xml").read_text()
    assert text.startswith(real_text[: real_text.index("\t<gpu ")])
    assert text.endswith(real_text[real_text.index("\t</gpu>") :])


# --- the fleet fixtures ---------------------------------------------------------------------------------


def test_sm120_is_eight_pcie_rtx_pro_6000() -> None:
    lines = stdout(
        "sm120", "--query-gpu=index,name,compute_cap,memory.total", "--format=csv,noheader"
    ).splitlines()
    assert len(lines) == 8
    for index, line in enumerate(lines):
        assert line == f"{index}, NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0, 97887 MiB"
    topo = stdout("sm120", "topo", "-m")
    assert "NV" not in matrix_part(topo)
    assert {"PIX", "NODE", "SYS"} <= set(matrix_part(topo).split())
    assert len(stdout("sm120", "-L").splitlines()) == 8


def test_long_names_are_cut_in_the_table_as_real_nvidia_smi_does() -> None:
    table = stdout("sm120")
    assert table.count("|   0  NVIDIA RTX PRO 6000 Blac...    On  |   00000000:16:00.0 Off |") == 1
    assert "| N/A   28C    P8             34W /  600W |       0MiB /  97887MiB |" in table
    assert all(len(line) == 91 for line in table.splitlines()[1:] if line)


@pytest.mark.parametrize(
    ("fixture", "compute_cap", "memory"), [("sm100", "10.0", 183359), ("sm90", "9.0", 143771)]
)
def test_nvlink_fixtures(fixture: str, compute_cap: str, memory: int) -> None:
    rows = stdout(
        fixture, "--query-gpu=compute_cap,memory.total", "--format=csv,noheader,nounits"
    ).splitlines()
    assert rows == [f"{compute_cap}, {memory}"] * 8
    matrix = matrix_part(stdout(fixture, "topo", "-m"))
    gpu_rows = [line.split("\t") for line in matrix.splitlines() if line.startswith("GPU")]
    assert len(gpu_rows) == 8
    for i, row in enumerate(gpu_rows):
        assert row[1:9] == [" X " if j == i else "NV18" for j in range(8)]


def test_b200_table_row_matches_public_b200_output() -> None:
    assert "| N/A   30C    P0            141W / 1000W |       0MiB / 183359MiB |" in stdout("sm100")


def test_nic_columns_and_legend() -> None:
    topo = stdout("sm90", "topo", "-m")
    header = topo.splitlines()[0]
    assert header.startswith("\t\x1b[4mGPU0\t") and "\tNIC7\tCPU Affinity\t" in header
    assert "GPU0\t X \tNV18" in topo
    assert "\nNIC0\tPIX\tNODE\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t X \t" in topo
    assert topo.endswith("\nNIC Legend:\n\n" + "".join(f"  NIC{i}: mlx5_{i}\n" for i in range(8)) + "\n")


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_fixture_says_where_its_facts_come_from(name: str) -> None:
    fixture = load(name)
    assert fixture["_source"].strip()
    assert fixture["_comment"].strip()


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_fixture_is_self_consistent(name: str) -> None:
    fixture = load(name)
    gpus = fixture["gpus"]
    assert [g["index"] for g in gpus] == list(range(len(gpus)))
    assert len({g["uuid"] for g in gpus}) == len(gpus)
    assert len({g["pci_bus_id"] for g in gpus}) == len(gpus)
    assert len({g["compute_cap"] for g in gpus}) == 1
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", g["uuid"]) for g in gpus)
    links = fixture["topology"]["links"]
    assert all(links[i][j] == links[j][i] for i in range(len(gpus)) for j in range(len(gpus)))
    if fixture["gpus"][0]["name"].startswith("NVIDIA RTX PRO 6000"):
        assert not any(link.startswith("NV") for row in links for link in row)


def test_fixture_names_cover_the_lab_architectures() -> None:
    assert set(ALL_FIXTURES) >= {"sm120", "sm100", "sm90", "h200-1gpu"}


# --- errors, as real nvidia-smi reports them ------------------------------------------------------------


def test_unknown_field_exits_2_like_real_nvidia_smi() -> None:
    result = run("sm120", "--query-gpu=index,xyz", "--format=csv")
    assert result.returncode == 2
    assert result.stdout == b'Field "xyz" is not a valid field to query.\n\n'


def test_query_without_format_is_refused() -> None:
    result = run("sm120", "--query-gpu=index")
    assert result.returncode == 2
    assert result.stdout.startswith(b"Invalid combination of input arguments.")


def test_unknown_option_is_refused() -> None:
    result = run("sm120", "--frobnicate")
    assert result.returncode == 2
    assert (
        result.stdout
        == b"ERROR: Option --frobnicate is not recognized. Please run 'nvidia-smi -h' for help.\n\n"
    )
    assert b"not emulated" in result.stderr


def test_fixture_can_make_the_driver_fail(tmp_path: Path) -> None:
    fixture = load("sm120") | {"fail": {"exit_code": 9}}
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(fixture))
    for args in ((), ("-L",), ("--query-gpu=index", "--format=csv")):
        result = run(path, *args)
        assert result.returncode == 9
        assert result.stdout.startswith(
            b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA"
        )


def test_missing_fixture_is_a_loud_lab_error(tmp_path: Path) -> None:
    result = run(tmp_path / "absent.json", "-L")
    assert result.returncode == 255
    assert result.stdout == b""
    assert b"glm5 lab stand-in" in result.stderr and b"absent.json" in result.stderr


def test_id_selects_gpus() -> None:
    assert stdout("sm90", "-i", "3", "--query-gpu=index", "--format=csv,noheader") == "3\n"
    assert stdout("sm90", "--id=1,2", "-L").count("GPU ") == 2
    result = run("sm90", "-i", "8", "-L")
    assert (result.returncode, result.stdout) == (6, b"No devices were found\n")


def test_units_and_missing_values_in_csv() -> None:
    query = "--query-gpu=power.limit,fan.speed,memory.free,temperature.gpu,count"
    assert stdout("h200-1gpu", query, "--format=csv").splitlines() == [
        "power.limit [W], fan.speed [%], memory.free [MiB], temperature.gpu, count",
        "700.00 W, [N/A], 143156 MiB, 32, 1",
    ]
    assert stdout("h200-1gpu", query, "--format=nounits,noheader,csv") == "700.00, [N/A], 143156, 32, 1\n"


# --- what the stand-in is --------------------------------------------------------------------------------


def test_standin_is_an_executable_stdlib_only_test_double() -> None:
    source = STANDIN.read_text()
    assert source.startswith("#!/usr/bin/python3\n")
    assert STANDIN.stat().st_mode & stat.S_IXUSR
    docstring = ast.get_docstring(ast.parse(source)) or ""
    assert "test double" in docstring and "never ships to production" in docstring
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_installed_stand_in_driver_package_sets_the_loaded_driver_and_persistence(tmp_path: Path) -> None:
    version = tmp_path / "driver-version"
    version.write_text("580.105.08\n")
    persistence = tmp_path / "persistence-mode"
    state = {"GLM5_LAB_DRIVER_VERSION_FILE": str(version), "GLM5_LAB_PERSISTENCE_FILE": str(persistence)}
    query = ("--query-gpu=driver_version,persistence_mode", "--format=csv,noheader")

    # Package installed, daemon not running: the package's driver, persistence off.
    result = run("sm120", *query, state=state)
    assert result.returncode == 0, result
    assert set(result.stdout.decode().splitlines()) == {"580.105.08, Disabled"}
    assert "580.105.08" in run("sm120", "--version", state=state).stdout.decode()

    # The stand-in daemon started with --persistence-mode.
    persistence.write_text("Enabled\n")
    assert set(run("sm120", *query, state=state).stdout.decode().splitlines()) == {"580.105.08, Enabled"}
