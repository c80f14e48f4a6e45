"""Read the raw HTTP captures in tests/fixtures/sglang-responses/ (real sglang 0.5.23 answers)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang-responses"


@dataclass(frozen=True)
class Capture:
    """One capture: the '#' comment lines, then the status, headers and body (status None: no response)."""

    name: str
    comments: tuple[str, ...]
    status: int | None
    headers: dict[str, str]
    body: bytes


def parse_capture(name: str, raw: bytes) -> Capture:
    """Skip the '#' lines, then read the status line, the headers up to the blank line, and the body."""
    lines = raw.split(b"\n")
    comments = []
    while lines and lines[0].startswith(b"#"):
        comments.append(lines.pop(0).decode())
    if not lines or not lines[0].startswith(b"HTTP/"):
        return Capture(name, tuple(comments), None, {}, b"")
    status = int(lines.pop(0).split()[1])
    headers = {}
    while lines and lines[0].strip():
        key, _, value = lines.pop(0).decode().partition(":")
        headers[key.strip().lower()] = value.strip()
    body = b"\n".join(lines[1:])
    return Capture(name, tuple(comments), status, headers, body)


def load(name: str) -> Capture:
    return parse_capture(name, (CAPTURES / f"{name}.http").read_bytes())


def names() -> list[str]:
    return sorted(path.stem for path in CAPTURES.glob("*.http"))


def server_log() -> str:
    return (CAPTURES / "nan_lnf__server_log_excerpt.txt").read_text()
