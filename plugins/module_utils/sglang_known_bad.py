"""Match resolved sglang settings against the known-bad table (plugins/data/known_bad.yml).

Pure: the table, settings, arch, version and GPU memory all come in as arguments. ``guard`` turns findings
into the messages a play prints: ``block`` findings refuse the deploy unless ``sglang_allow_known_bad`` is
true; ``warn`` findings are printed with their source and the play goes on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    DATA_DIR,
    SglangFlagError,
    load_yaml,
    version_matches,
)

SEVERITIES = ("block", "warn")
_MATCH_KEYS = {"arch", "sglang_version", "gpu_memory_mib", "settings", "any_settings"}
_REQUIRED = ("id", "severity", "match", "symptom", "source", "fix")


@dataclass(frozen=True)
class Finding:
    """One known-bad entry that matched."""

    id: str
    severity: str
    symptom: str
    source: str
    fix: str
    arch: str
    sglang_version: str
    matched: dict[str, Any] = field(default_factory=dict)
    gpu_memory_unknown: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@lru_cache(maxsize=4)
def load_known_bad(data_dir: str | None = None) -> dict[str, Any]:
    """known_bad.yml as a dict with ``entries``; checked with validate_table."""
    table = load_yaml((Path(data_dir) if data_dir else DATA_DIR) / "known_bad.yml")
    validate_table(table)
    return table


def _entries(table: Mapping[str, Any] | Sequence[Any]) -> list[Mapping[str, Any]]:
    if isinstance(table, Mapping):
        return list(table.get("entries") or [])
    return list(table)


def validate_table(table: Mapping[str, Any] | Sequence[Any]) -> None:
    """Raise SglangFlagError naming the first malformed entry."""
    seen: set[str] = set()
    for index, entry in enumerate(_entries(table)):
        where = (
            f"known_bad entry #{index + 1} ({entry.get('id', '?') if isinstance(entry, Mapping) else '?'})"
        )
        if not isinstance(entry, Mapping):
            raise SglangFlagError(f"{where} must be a mapping")
        missing = [key for key in _REQUIRED if entry.get(key) in (None, "")]
        if missing:
            raise SglangFlagError(f"{where} lacks {', '.join(missing)}")
        if entry["id"] in seen:
            raise SglangFlagError(f"{where}: duplicate id")
        seen.add(entry["id"])
        if entry["severity"] not in SEVERITIES:
            raise SglangFlagError(f"{where}: severity must be block or warn, not {entry['severity']!r}")
        match = entry["match"]
        if not isinstance(match, Mapping) or set(match) - _MATCH_KEYS:
            raise SglangFlagError(f"{where}: match may only hold {', '.join(sorted(_MATCH_KEYS))}")
        groups = [match.get("settings") or {}, *(match.get("any_settings") or [])]
        for group in groups:
            for key, predicate in group.items():
                _check_predicate(predicate, f"{where} setting {key}")
        if "gpu_memory_mib" in match:
            _check_predicate(match["gpu_memory_mib"], f"{where} gpu_memory_mib")
        if "sglang_version" in match:
            version_matches("0.0.0", match["sglang_version"])  # raises on an unreadable range


_OPS = {"in", "not_in", "eq", "gt", "gte", "lt", "lte", "absent"}


def _check_predicate(predicate: Any, where: str) -> None:
    if not isinstance(predicate, Mapping) or not predicate or set(predicate) - _OPS:
        raise SglangFlagError(f"{where}: a predicate is a mapping using {', '.join(sorted(_OPS))}")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def predicate_holds(predicate: Mapping[str, Any], value: Any) -> bool:
    """Evaluate one predicate; value None means the setting is not set."""
    for op, arg in predicate.items():
        if op == "absent":
            ok = (value is None) == bool(arg)
        elif op == "in":
            ok = value is not None and value in list(arg)
        elif op == "not_in":
            ok = value is None or value not in list(arg)
        elif op == "eq":
            ok = value is not None and value == arg
        else:
            number, limit = _number(value), _number(arg)
            if number is None or limit is None:
                ok = False
            else:
                ok = {
                    "gt": number > limit,
                    "gte": number >= limit,
                    "lt": number < limit,
                    "lte": number <= limit,
                }[op]
        if not ok:
            return False
    return True


def _group_holds(group: Mapping[str, Any], settings: Mapping[str, Any]) -> bool:
    return all(predicate_holds(predicate, settings.get(key)) for key, predicate in group.items())


def match_known_bad(
    table: Mapping[str, Any] | Sequence[Any],
    settings: Mapping[str, Any],
    arch: str,
    version: str,
    gpu_memory_mib: int | float | None = None,
) -> list[Finding]:
    """Every table entry that matches these resolved settings on this arch and sglang version.

    An entry with a gpu_memory_mib predicate matches when the memory is unknown (None): fail safe.
    """
    findings: list[Finding] = []
    for entry in _entries(table):
        match = entry["match"]
        if "arch" in match and arch not in match["arch"]:
            continue
        if not version_matches(str(version), match.get("sglang_version")):
            continue
        memory_unknown = False
        if "gpu_memory_mib" in match:
            if gpu_memory_mib is None:
                memory_unknown = True
            elif not predicate_holds(match["gpu_memory_mib"], gpu_memory_mib):
                continue
        group = match.get("settings") or {}
        if not _group_holds(group, settings):
            continue
        keys = list(group)
        any_groups = match.get("any_settings")
        if any_groups:
            hit = next((g for g in any_groups if _group_holds(g, settings)), None)
            if hit is None:
                continue
            keys += [key for key in hit if key not in keys]
        findings.append(
            Finding(
                id=str(entry["id"]),
                severity=str(entry["severity"]),
                symptom=" ".join(str(entry["symptom"]).split()),
                source=" ".join(str(entry["source"]).split()),
                fix=" ".join(str(entry["fix"]).split()),
                arch=str(arch),
                sglang_version=str(version),
                matched={key: settings.get(key) for key in keys},
                gpu_memory_unknown=memory_unknown,
            )
        )
    return findings


def format_finding(finding: Finding) -> str:
    """One line naming the entry, the settings that matched, the symptom, the source and the fix."""
    if finding.matched:
        shown = ", ".join(
            f"{key}={'(unset)' if value is None else value}" for key, value in finding.matched.items()
        )
    else:
        shown = "this arch and version"
    memory = " (GPU memory unknown, assumed to match)" if finding.gpu_memory_unknown else ""
    return (
        f"known-bad [{finding.id}] {finding.severity}: {shown} on {finding.arch} with sglang "
        f"{finding.sglang_version}{memory}. Symptom: {finding.symptom} Source: {finding.source} "
        f"Fix: {finding.fix}"
    )


def guard(
    findings: Sequence[Finding | Mapping[str, Any]], allow_known_bad: bool
) -> tuple[list[str], list[str]]:
    """(blocked messages, warning messages). Blocks become warnings when allow_known_bad is true."""
    blocked: list[str] = []
    warnings: list[str] = []
    for item in findings:
        finding = item if isinstance(item, Finding) else Finding(**dict(item))
        message = format_finding(finding)
        if finding.severity == "block" and not allow_known_bad:
            blocked.append(f"{message} To deploy anyway set sglang_allow_known_bad: true.")
        elif finding.severity == "block":
            warnings.append(f"{message} Deploying anyway because sglang_allow_known_bad is true.")
        else:
            warnings.append(message)
    return blocked, warnings
