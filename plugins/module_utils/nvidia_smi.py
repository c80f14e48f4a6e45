"""Parse nvidia-smi output into GPU facts (pure functions, no I/O).

The nvidia_gpu_facts module runs nvidia-smi and hands the text here. Formats are those of real nvidia-smi
(ground truth: tests/fixtures/nvidia-smi/h200-sm90/, captured on an H200 with driver 580.159.04).

Anything that is not what nvidia-smi prints on a healthy node raises GpuFactsError with a message that says
what was wrong and where; nothing else escapes (tests/unit/test_nvidia_smi.py checks that with hypothesis).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypedDict

# The fields the module asks for, in this order, and the command-line arguments that ask for them.
QUERY_FIELDS = ("index", "name", "compute_cap", "memory.total", "driver_version", "pci.bus_id")
QUERY_ARGS = ("--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits")
TOPOLOGY_ARGS = ("topo", "-m")

# ASCII digits only (str.isdigit and int() also take other scripts' digits), and few enough for int().
_INDEX = re.compile(r"[0-9]{1,6}")
_COMPUTE_CAP = re.compile(r"([0-9]{1,3})\.([0-9])")
_MEMORY = re.compile(r"[0-9]{1,12}")
_DRIVER = re.compile(r"[0-9]+(?:\.[0-9]+)*")
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_DEVICE = re.compile(r"(GPU|NIC)([0-9]+)")
_NVLINK = re.compile(r"NV[0-9]+")


class GpuFactsError(Exception):
    """nvidia-smi output that cannot be turned into facts, or facts that do not describe one usable node."""


class GpuInfo(TypedDict):
    """One GPU, as parsed from one line of the query."""

    index: int
    name: str
    compute_cap: str
    memory_mib: int
    driver_version: str
    pci_bus_id: str


class Topology(TypedDict):
    """The GPU-to-GPU part of `nvidia-smi topo -m`."""

    gpus: list[str]
    links: list[list[str]]
    link_types: list[str]
    nvlink: bool


def _fail_line(number: int, line: str, problem: str) -> GpuFactsError:
    return GpuFactsError(f"nvidia-smi query output, line {number} ({line!r}): {problem}")


def parse_query_csv(text: str, fields: Sequence[str] = QUERY_FIELDS) -> list[GpuInfo]:
    """Parse `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits` output, one GPU a line.

    ``fields`` is the field list the query asked for, in its order; it must hold every one of QUERY_FIELDS
    and may hold more (those columns are ignored).
    """
    missing = [field for field in QUERY_FIELDS if field not in fields]
    if missing:
        raise GpuFactsError(f"the query must ask for {', '.join(missing)} as well")
    column = {field: fields.index(field) for field in QUERY_FIELDS}
    gpus: list[GpuInfo] = []
    seen: set[int] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if cells[0] == "index" or any(cell.endswith("]") and " [" in cell for cell in cells):
            raise _fail_line(number, line, "this is a CSV header; query with --format=csv,noheader,nounits")
        if len(cells) != len(fields):
            raise _fail_line(
                number, line, f"expected {len(fields)} fields ({', '.join(fields)}), got {len(cells)}"
            )
        index, name, compute_cap, memory, driver, bus_id = (cells[column[field]] for field in QUERY_FIELDS)
        if not _INDEX.fullmatch(index):
            raise _fail_line(number, line, f"GPU index {index!r} is not a whole number")
        if not name:
            raise _fail_line(number, line, "the GPU name is empty")
        if not _COMPUTE_CAP.fullmatch(compute_cap):
            raise _fail_line(
                number,
                line,
                f"compute_cap {compute_cap!r} is not MAJOR.MINOR (is the driver older than R510?)",
            )
        if not _MEMORY.fullmatch(memory):
            raise _fail_line(
                number,
                line,
                f"memory.total {memory!r} is not a whole number of MiB (was 'nounits' left out?)",
            )
        if not _DRIVER.fullmatch(driver):
            raise _fail_line(number, line, f"driver_version {driver!r} is not a version number")
        if not _BUS_ID.fullmatch(bus_id):
            raise _fail_line(
                number, line, f"pci.bus_id {bus_id!r} is not a PCI address (DOMAIN:BUS:DEVICE.FN)"
            )
        gpu_index = int(index)
        if gpu_index in seen:
            raise _fail_line(number, line, f"GPU index {gpu_index} appears twice")
        seen.add(gpu_index)
        gpus.append(
            {
                "index": gpu_index,
                "name": name,
                "compute_cap": compute_cap,
                "memory_mib": int(memory),
                "driver_version": driver,
                "pci_bus_id": bus_id,
            }
        )
    if not gpus:
        raise GpuFactsError("nvidia-smi listed no GPUs: the query printed nothing")
    return gpus


def arch_from_compute_cap(compute_cap: str) -> str:
    """The CUDA architecture name of a compute capability: "12.0" -> "sm120", "9.0" -> "sm90"."""
    match = _COMPUTE_CAP.fullmatch(compute_cap.strip())
    if not match:
        raise GpuFactsError(
            f"compute capability {compute_cap!r} is not MAJOR.MINOR (for example 9.0 or 12.0)"
        )
    return f"sm{int(match.group(1))}{match.group(2)}"


def _group_indexes(pairs: Sequence[tuple[str, int]]) -> dict[str, list[int]]:
    """{value: [GPU indexes with that value]}, in first-seen order."""
    groups: dict[str, list[int]] = {}
    for value, index in pairs:
        groups.setdefault(value, []).append(index)
    return groups


def _describe(groups: dict[str, list[int]]) -> str:
    return "; ".join(
        f"{value} on GPU {', '.join(str(i) for i in indexes)}" for value, indexes in groups.items()
    )


def summarize(gpus: Sequence[GpuInfo]) -> dict[str, Any]:
    """Facts for one node; all its GPUs must share one architecture and one driver."""
    if not gpus:
        raise GpuFactsError("no GPUs to summarize: nvidia-smi listed none")
    ordered = sorted(gpus, key=lambda gpu: gpu["index"])
    arches = _group_indexes([(arch_from_compute_cap(gpu["compute_cap"]), gpu["index"]) for gpu in ordered])
    if len(arches) > 1:
        raise GpuFactsError(
            f"mixed GPU architectures on one node: {_describe(arches)}. One SGLang launch needs one "
            "architecture; limit the node to one kind of GPU (CUDA_VISIBLE_DEVICES) or split it."
        )
    drivers = _group_indexes([(gpu["driver_version"], gpu["index"]) for gpu in ordered])
    if len(drivers) > 1:
        raise GpuFactsError(
            f"mixed driver versions on one node: {_describe(drivers)}. Reboot after a driver upgrade so "
            "every GPU runs the same driver."
        )
    names = sorted({gpu["name"] for gpu in ordered})
    return {
        "gpus": [
            {
                "index": gpu["index"],
                "name": gpu["name"],
                "compute_cap": gpu["compute_cap"],
                "memory_mib": gpu["memory_mib"],
                "driver_version": gpu["driver_version"],
                "pci_bus_id": gpu["pci_bus_id"],
            }
            for gpu in ordered
        ],
        "arch": next(iter(arches)),
        "compute_cap": ordered[0]["compute_cap"],
        "count": len(ordered),
        "driver_version": ordered[0]["driver_version"],
        "names": names,
        "memory_mib_min": min(gpu["memory_mib"] for gpu in ordered),
    }


def _is_header(line: str) -> bool:
    first = line.split()[:1]
    return line[:1].isspace() and bool(first) and _DEVICE.fullmatch(first[0]) is not None


def parse_topology(text: str) -> Topology:
    """Parse `nvidia-smi topo -m` into the GPU-to-GPU link matrix; NIC rows and columns are skipped.

    ``links[i][j]`` is the link between GPU i and GPU j as printed ("X" on the diagonal, "NV18", "PIX",
    "NODE", "SYS", ...). ``nvlink`` is true when any two GPUs are joined by NVLink (NV#).
    """
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    # The header is the one line that starts with white space and then a device label; rows start with theirs.
    header_at = next((n for n, line in enumerate(lines) if _is_header(line)), None)
    if header_at is None:
        raise GpuFactsError("nvidia-smi topo -m printed no matrix: no header line of GPU0, GPU1, ...")
    columns: list[str] = []
    for label in lines[header_at].split():
        if not _DEVICE.fullmatch(label):
            break
        columns.append(label)
    gpu_columns = [n for n, label in enumerate(columns) if label.startswith("GPU")]
    gpus = [columns[n] for n in gpu_columns]
    if not gpus:
        raise GpuFactsError("nvidia-smi topo -m printed no GPU columns")
    if gpus != [f"GPU{i}" for i in range(len(gpus))]:
        raise GpuFactsError(f"nvidia-smi topo -m header lists GPUs out of order: {' '.join(gpus)}")
    rows: dict[str, list[str]] = {}
    for line in lines[header_at + 1 :]:
        tokens = line.split()
        if not tokens or not _DEVICE.fullmatch(tokens[0]):
            break
        if tokens[0].startswith("GPU"):
            if len(tokens) < len(columns) + 1:
                raise GpuFactsError(
                    f"nvidia-smi topo -m row {tokens[0]} has {len(tokens) - 1} cells, expected {len(columns)}"
                )
            rows[tokens[0]] = [tokens[1 + n] for n in gpu_columns]
    links: list[list[str]] = []
    for i, gpu in enumerate(gpus):
        if gpu not in rows:
            raise GpuFactsError(f"nvidia-smi topo -m has a {gpu} column but no {gpu} row")
        row = rows[gpu]
        if row[i] != "X":
            raise GpuFactsError(f"nvidia-smi topo -m row {gpu} does not show X (self) in column {gpu}")
        links.append(row)
    if len(rows) != len(gpus):
        extra = sorted(set(rows) - set(gpus))
        raise GpuFactsError(f"nvidia-smi topo -m has rows without columns: {' '.join(extra)}")
    link_types = sorted({link for i, row in enumerate(links) for j, link in enumerate(row) if i != j})
    return {
        "gpus": gpus,
        "links": links,
        "link_types": link_types,
        "nvlink": any(_NVLINK.fullmatch(link) for link in link_types),
    }


def check_topology_matches(summary: dict[str, Any], topology: Topology) -> None:
    """The query and topo -m must see the same number of GPUs."""
    if len(topology["gpus"]) != summary["count"]:
        raise GpuFactsError(
            f"nvidia-smi --query-gpu lists {summary['count']} GPU(s) but topo -m shows "
            f"{len(topology['gpus'])}; run nvidia-smi on the node to see which is wrong"
        )
