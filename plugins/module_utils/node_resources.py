"""A node's capacity for preflight: free disk at paths, RAM, /dev/shm (pure helpers)."""

from __future__ import annotations

import os
from collections.abc import Callable

GIB = 1024**3


def nearest_existing(path: str, exists: Callable[[str], bool] = os.path.exists) -> str:
    """The path itself, or its closest ancestor that exists (where a directory to be created would live)."""
    current = os.path.abspath(path)
    while not exists(current):
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current


def parse_meminfo(text: str) -> int:
    """MemTotal from /proc/meminfo, in bytes."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            return int(parts[1]) * 1024
    raise ValueError("no MemTotal line in /proc/meminfo")


def shortfalls(
    free_bytes: dict[str, int],
    min_free_gib: dict[str, float],
    mem_bytes: int,
    min_mem_gib: float,
    shm_bytes: int,
    min_shm_gib: float,
) -> list[str]:
    """What the node lacks, each in words with the variable that sets the floor."""
    problems = []
    for path, floor in min_free_gib.items():
        have = free_bytes[path] / GIB
        if have < floor:
            problems.append(
                f"{have:.1f} GiB free for {path}, below preflight_min_free_disk_gib {floor:g}; "
                "free space there or point model_checkpoint_local_dir at a larger filesystem"
            )
    if mem_bytes / GIB < min_mem_gib:
        problems.append(f"{mem_bytes / GIB:.1f} GiB of RAM, below preflight_min_ram_gib {min_mem_gib:g}")
    if shm_bytes / GIB < min_shm_gib:
        problems.append(
            f"/dev/shm is {shm_bytes / GIB:.2f} GiB, below preflight_min_shm_gib {min_shm_gib:g}; "
            "enlarge it (tmpfs size= in /etc/fstab)"
        )
    return problems
