"""Build the per-host summary that site.yml prints at the end of a run (pure functions)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import ROLE_DEFAULTS
from ansible_collections.glm5.deploy.plugins.module_utils.guard_policy import (
    GATE_ABSENT,
    GATE_PRESENT,
    RULE_CAP,
    RULE_LAST,
    RULE_SUSPECT,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import EVIDENCE_PROVEN

COLUMNS = ("host", "gpus", "arch", "driver", "profile", "release", "validated", "router")
ROUTER_SYMPTOM_CHARS = 80

# A replica's verdict in this run, from its rank 0's sglang_validate_result: the one definition of "proven"
# that the summary, the run's stats, the validate gate's plays and the rollout's switch read.
PROVEN = "proven"
FAILED = "failed"
NOT_JUDGED = "not judged"


def validation_verdict(result: Mapping[str, Any] | None) -> str:
    """PROVEN when the inference check passed in this run, FAILED when it ran and did not pass, NOT_JUDGED
    when it did not run (no result, or skipped: a multi-node replica's rank > 0)."""
    if not isinstance(result, Mapping) or not result or result.get("skipped"):
        return NOT_JUDGED
    return PROVEN if result.get("passed") else FAILED


def _profile(launch: Mapping[str, Any] | None) -> str:
    if not launch:
        return "-"
    # The evidence level (resolve_profile) when it is below seed-run: what the operator deploys unproven.
    evidence = launch.get("evidence") or {"level": "untested", "rank": 0}
    proven = evidence.get("rank", 0) >= EVIDENCE_PROVEN
    suffix = "" if proven else f"({evidence.get('level')})"
    return f"{launch.get('arch')}/{launch.get('lane')}{suffix}"


def host_row(host: str, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """One row of the summary; a stage that did not run on the host shows as '-'."""
    gpu = hostvars.get("nvidia_gpu") or {}
    names = gpu.get("names") or []
    gpus = f"{gpu['count']}x {names[0]}" if gpu.get("count") and names else "-"
    validation = hostvars.get("sglang_validate_result")
    verdict = validation_verdict(validation)
    validated = {PROVEN: "passed", FAILED: "FAILED"}.get(verdict, "-")
    router = router_cell(hostvars.get("sglang_router_replica"), validation, gate_entry(host, hostvars))
    start = hostvars.get("sglang_server_health")
    if validation is None and isinstance(start, Mapping) and start.get("verdict") not in (None, "healthy"):
        # The server never became healthy (its engine stopped at its first NaN, a crash loop, a stalled
        # start): never asked, never routed; the router's health check and the guard keep it out.
        validated = "FAILED at start"
        router = (
            f"out of the router: {_short(start.get('symptom') or 'it did not start', ROUTER_SYMPTOM_CHARS)}"
        )
    left_out = hostvars.get("glm5_left_out")
    if left_out:
        # Failed its own checks (preflight, a rollout's staging) or unreachable: left out of the run, within
        # preflight_node_failure_budget, while the others went on.
        validated = "LEFT OUT"
        router = f"left out of the run: {_short(left_out, ROUTER_SYMPTOM_CHARS)}"
    return {
        "host": host,
        "gpus": gpus,
        "arch": str(gpu.get("arch") or "-"),
        "driver": str(gpu.get("driver_version") or "-"),
        "release": str(hostvars.get("sglang_release_name") or "-"),
        "profile": _profile(hostvars.get("sglang_launch")),
        "validated": validated,
        "router": router,
    }


def gate_entry(host: str, hostvars: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[str]]:
    """(the host's entry of the validate gate's plan, the suspect probes): ``({}, [])`` without a gate."""
    gate = hostvars.get("sglang_validate_gate")
    if not isinstance(gate, Mapping):
        return {}, []
    entry = (gate.get("hosts") or {}).get(host)
    return (entry if isinstance(entry, Mapping) else {}), list(gate.get("suspects") or [])


def kept_words(rule: object, suspects: Iterable[str]) -> str | None:
    """Why the gate left a failing replica where it was, or None when no rule did."""
    if rule == RULE_CAP:
        return "the removal cap (sglang_validate_max_removal_fraction) holds it in"
    if rule == RULE_LAST:
        return "it is the last healthy replica (the router is never emptied)"
    if rule == RULE_SUSPECT:
        names = ", ".join(f"'{name}'" for name in suspects) or "a probe"
        return f"every replica judged failed probe {names} with sound answers: the probe is suspect, not it"
    return None


def router_cell(
    routed: object,
    validation: Mapping[str, Any] | None,
    gate: tuple[Mapping[str, Any], list[str]] = ({}, []),
) -> str:
    """Where validate.yml left the host's replica: ``in``, ``out of the router: <symptom>``, ``not taken out
    (<rule>): <symptom>``, or ``-``.

    ``routed`` is the fact validate.yml sets on a replica's rank 0 after routing it (``in``, ``out`` or
    ``kept``); ``gate`` the host's entry of the validate gate's plan and the suspect probes, which name the
    rule that kept a failing replica where it was. Any other host, or a run that did not route, shows ``-``.
    """
    symptom = _short((validation or {}).get("msg") or "inference check failed", ROUTER_SYMPTOM_CHARS)
    if routed == "in":
        return "in"
    if routed == "out":
        return f"out of the router: {symptom}"
    if routed == "kept":
        entry, suspects = gate
        why = kept_words(entry.get("rule"), suspects) or "left as it was"
        return f"not taken out ({why}): {symptom}"
    return "-"


def failure_words(host: str, hostvars: Mapping[str, Mapping[str, Any]], routed: bool) -> str:
    """The words summary.yml adds to a failed node's symptom: where its replica is and which rule decided,
    the suspect probes, and whether any replica checked in the run passed. ``hostvars``: the play's hosts."""
    own = hostvars[host]
    words: list[str] = []
    entry, suspects = gate_entry(host, own)
    if routed:
        state = entry.get("state")
        if state == GATE_ABSENT or (not entry and own.get("sglang_router_replica") == "out"):
            words.append("Out of the router.")
        elif state != GATE_PRESENT:
            why = kept_words(entry.get("rule"), suspects)
            if why:
                words.append(f"Not taken out of the router: {why}.")
    if suspects:
        names = ", ".join(f"'{name}'" for name in suspects)
        words.append(
            f"Suspect probe {names}: every replica judged failed it with otherwise sound answers - check its "
            "expect (sglang_validate_probes); no replica's router state was changed for it."
        )
    if not proven_replicas(hostvars, hostvars):
        words.append("No replica checked in this run passed.")
    return " ".join(words)


def proven_replicas(hosts: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The hosts whose inference check passed in this run (a replica's rank 0: rank > 0 is never checked)."""
    return [h for h in hosts if validation_verdict(hostvars[h].get("sglang_validate_result")) == PROVEN]


def format_table(rows: Iterable[Mapping[str, str]], columns: tuple[str, ...] = COLUMNS) -> list[str]:
    """Render rows as aligned text lines, header first."""
    rows = list(rows)
    widths = {c: max([len(c), *(len(r.get(c, "")) for r in rows)]) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns).rstrip()]
    lines += ["  ".join(r.get(c, "").ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return lines


def fleet_summary(hosts: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The summary table for the given hosts, in inventory order."""
    return format_table(host_row(h, hostvars[h]) for h in hosts)


def edge_lines(routers: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A line for each router host whose edge speaks plain HTTP (no sglang_router_tls_certificate), so that a
    run never ends without saying so; the inputs check lets such an edge through only with
    sglang_router_edge_plain_http true, whose value the line shows. Nothing for an edge with TLS."""
    lines = []
    for host in routers:
        own = hostvars[host]
        certificate = own.get("sglang_router_tls_certificate")
        if isinstance(certificate, str) and certificate.strip():
            continue
        port = own.get("sglang_router_port", ROLE_DEFAULTS["sglang_router_port"])
        plain = own.get("sglang_router_edge_plain_http", False)
        flag = "true" if boolean(plain, strict=False) else "false"
        lines.append(f"edge: plain HTTP on port {port} of {host} (sglang_router_edge_plain_http: {flag})")
    return lines


VALIDATION_COLUMNS = ("host", "probe", "verdict", "finish", "latency_s", "content", "symptom")


def _short(text: Any, width: int) -> str:
    flat = " ".join(str(text if text is not None else "").split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def validation_rows(host: str, validation: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """One row per probe of a host's inference-check result; an unchecked host gets one row."""
    if validation_verdict(validation) == NOT_JUDGED:
        return [{"host": host, "probe": "-", "verdict": "not checked"}]
    probes = validation.get("probes") or []
    if not probes:
        return [
            {"host": host, "probe": "-", "verdict": "FAILED", "symptom": _short(validation.get("msg"), 90)}
        ]
    rows = []
    for probe in probes:
        latency = probe.get("latency_s")
        rows.append(
            {
                "host": host,
                "probe": str(probe.get("name")),
                "verdict": "passed" if probe.get("passed") else "FAILED",
                "finish": str(probe.get("finish_reason")),
                "latency_s": "-" if latency is None else f"{float(latency):.2f}",
                "content": _short(probe.get("content"), 24),
                "symptom": _short("; ".join(probe.get("failures") or []), 90),
            }
        )
    journal = validation.get("journal") or {}
    if journal and not journal.get("passed", True):
        findings = journal.get("findings") or [journal.get("error")]
        rows.append({"host": host, "probe": "journal", "verdict": "FAILED", "symptom": _short(findings, 90)})
    return rows


def validation_table(hosts: Iterable[str], hostvars: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The per-node, per-probe table that validate.yml prints."""
    rows = [row for h in hosts for row in validation_rows(h, hostvars[h].get("sglang_validate_result"))]
    return format_table(rows, VALIDATION_COLUMNS)
