"""Reading the systemd journal of an SGLang server's unit for the lines a NaN, an assert or a crash leaves.

A NaN-poisoned or crashing sglang often says so in its log before (or instead of) a bad answer: the module
``sglang_inference_check`` reads the unit's journal of its current run and reports every line that carries
one of ``judge_verdict``'s crash signatures (``CRASH_SIGNATURES``). Here: the unit name check (it becomes a
command argument), the parsing of ``systemctl show`` (also used by ``node_state`` and ``service_start``), the
``journalctl`` command for the unit's current run, whether journalctl's output can be trusted (without the
rights to read it, it shows nothing and looks clean) and the scan itself.

Pure functions, no I/O: the module runs systemctl and journalctl. This file imports from ``judge_verdict``,
never the other way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ansible_collections.glm5.deploy.plugins.module_utils.judge_verdict import clean_text, first_signature

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
JOURNAL_MAX_FINDINGS = 20
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\\][A-Za-z0-9:_.@\\-]*$")


def check_unit_name(unit: str) -> str | None:
    """None for a plausible systemd unit name, else why not (it becomes a command argument)."""
    if not unit or not UNIT_NAME.match(unit):
        return f"journal_unit {unit!r} is not a systemd unit name"
    return None


def journal_command(unit: str, props: Mapping[str, str]) -> tuple[list[str] | None, str]:
    """(journalctl arguments, what they cover) for the unit's log since its last start.

    The unit's current InvocationID selects exactly the messages of its current run. Without one (older
    systemd), the log of the unit since InactiveExitTimestamp (the moment it last started) is read. When the
    unit never started, the command is None.
    """
    invocation = props.get("InvocationID", "")
    if re.fullmatch(r"[0-9a-f]{32}", invocation):
        return (
            [
                "journalctl",
                "--no-pager",
                "-o",
                "short-iso",
                f"_SYSTEMD_INVOCATION_ID={invocation}",
            ],
            f"invocation {invocation}",
        )
    since = props.get("InactiveExitTimestamp", "") or props.get("ActiveEnterTimestamp", "")
    if since and since.lower() != "n/a":
        return (
            ["journalctl", "--no-pager", "-o", "short-iso", "-u", unit, "--since", since],
            f"since {since}",
        )
    return None, "the unit has not started"


def journal_read_problem(rc: int, stderr: str) -> str | None:
    """Why a journalctl run cannot be trusted, or None. Without the rights to read the system journal,
    journalctl prints a hint and shows nothing, which would look like a clean log."""
    hint = stderr.strip()
    if rc != 0:
        return f"journalctl failed (rc={rc}): {hint[:200] or 'no message'}"
    lowered = hint.lower()
    if "insufficient permissions" in lowered or "not seeing messages from other users" in lowered:
        return f"journalctl cannot read the unit's messages (run the task with become): {hint[:200]}"
    return None


def scan_journal(text: str) -> list[str]:
    """Lines of a server log that carry a NaN, assert or crash signature, as 'line N: meaning: excerpt'."""
    findings: list[str] = []
    total = 0
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = _ANSI.sub("", raw_line).strip()
        meaning = first_signature(line)
        if meaning is not None:
            total += 1
            if len(findings) < JOURNAL_MAX_FINDINGS:
                findings.append(clean_text(f"line {number}: {meaning}: {line[:200]}"))
    if total > len(findings):
        findings.append(f"… and {total - len(findings)} more matching lines")
    return findings
