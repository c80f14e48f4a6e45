"""The end-of-run fleet summary table."""

from __future__ import annotations

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import (
    COLUMNS,
    edge_lines,
    failure_words,
    fleet_summary,
    gate_entry,
    host_row,
    proven_replicas,
    router_cell,
    validation_verdict,
)

SM120 = {
    "nvidia_gpu": {
        "arch": "sm120",
        "count": 8,
        "names": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"],
        "driver_version": "580.159.04",
    }
}


def test_row_of_a_host_where_nothing_ran_is_dashes() -> None:
    assert host_row("n1", {}) == {"host": "n1", **dict.fromkeys(COLUMNS[1:], "-")}


def test_row_reports_gpus_and_validation_verdict() -> None:
    row = host_row("n1", {**SM120, "sglang_validate_result": {"passed": False}})
    assert row["gpus"] == "8x NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert (row["arch"], row["driver"], row["validated"]) == ("sm120", "580.159.04", "FAILED")
    assert host_row("n1", {"sglang_validate_result": {"passed": True}})["validated"] == "passed"


def test_table_is_aligned_and_in_the_given_order() -> None:
    lines = fleet_summary(["b", "a"], {"a": SM120, "b": {}})
    assert lines[0].split() == list(COLUMNS)
    assert [line.split()[0] for line in lines[1:]] == ["b", "a"]
    starts = {line.index(line.split()[1]) for line in lines}
    assert len(starts) == 1, lines


def test_validation_table_has_a_row_per_probe_and_names_the_symptom() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import validation_table

    healthy = {
        "passed": True,
        "probes": [
            {
                "name": "2+2",
                "passed": True,
                "finish_reason": "stop",
                "content": "4",
                "latency_s": 0.041,
                "failures": [],
            }
        ],
    }
    poisoned = {
        "passed": False,
        "msg": "x",
        "probes": [
            {
                "name": "2+2",
                "passed": False,
                "finish_reason": "length",
                "content": "",
                "latency_s": 0.5,
                "failures": ["degenerate output '!!!!!!!!'"],
            }
        ],
        "journal": {"passed": False, "findings": ["probability tensor contains either inf"]},
    }
    lines = validation_table(
        ["n1", "n2", "n3"],
        {"n1": {"sglang_validate_result": healthy}, "n2": {"sglang_validate_result": poisoned}, "n3": {}},
    )
    assert lines[0].split()[:3] == ["host", "probe", "verdict"]
    assert "n1" in lines[1] and "passed" in lines[1] and "0.04" in lines[1]
    assert "n2" in lines[2] and "FAILED" in lines[2] and "!!!!" in lines[2]
    assert "journal" in lines[3] and "probability tensor" in lines[3]
    assert "n3" in lines[4] and "not checked" in lines[4]


def test_row_names_the_release_and_the_resolved_profile() -> None:
    proven = {"level": "seed-run", "rank": 4}
    launch = {"arch": "sm120", "lane": "seed", "sglang_version": "0.5.9", "evidence": proven}
    row = host_row("n1", {"sglang_launch": launch, "sglang_release_name": "0.5.9-0123456789ab"})
    assert row["profile"] == "sm120/seed"
    assert row["release"] == "0.5.9-0123456789ab"
    launch["evidence"] = {"level": "nearby-run", "rank": 3}
    assert host_row("n1", {"sglang_launch": launch})["profile"] == "sm120/seed(nearby-run)"
    del launch["evidence"]
    assert host_row("n1", {"sglang_launch": launch})["profile"] == "sm120/seed(untested)"


def test_a_skipped_check_is_not_a_failure() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import validation_rows

    skipped = {"skipped": True, "changed": False}
    assert host_row("n2", {"sglang_validate_result": skipped})["validated"] == "-"
    assert validation_rows("n2", skipped)[0]["verdict"] == "not checked"


def test_router_cell_says_where_the_replica_is_with_the_symptom() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import router_cell

    failed = {"passed": False, "msg": "probe 2+2: content '!!!!!!!!' is degenerate"}
    assert router_cell("in", {"passed": True}) == "in"
    assert router_cell("out", failed) == "out of the router: probe 2+2: content '!!!!!!!!' is degenerate"
    assert router_cell("out", None) == "out of the router: inference check failed"
    assert router_cell(None, failed) == "-"
    long = router_cell("out", {"msg": "x " * 200})
    assert len(long) <= len("out of the router: ") + 80 and long.endswith("…")


def test_host_row_shows_the_routing_fact() -> None:
    hostvars = {"sglang_validate_result": {"passed": False, "msg": "NaN"}, "sglang_router_replica": "out"}
    row = host_row("n1", hostvars)
    assert (row["validated"], row["router"]) == ("FAILED", "out of the router: NaN")


def test_proven_replicas_are_the_passed_checked_hosts() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.fleet_summary import proven_replicas

    hostvars = {
        "a": {"sglang_validate_result": {"passed": True}},
        "b": {"sglang_validate_result": {"passed": False}},
        "c": {"sglang_validate_result": {"skipped": True}},
        "d": {},
    }
    assert proven_replicas(["a", "b", "c", "d"], hostvars) == ["a"]
    assert proven_replicas(["b", "d"], hostvars) == []


# --- Where the validate gate left a failing replica, and why


GATE = {
    "hosts": {
        "n1": {"state": "present", "rule": "passed"},
        "n2": {"state": "absent", "rule": "degenerate"},
        "n3": {"state": "unchanged", "rule": "removal-cap"},
        "n4": {"state": "unchanged", "rule": "last-healthy"},
    },
    "suspects": [],
}
FAILED = {"passed": False, "msg": "n: probe '2+2': failed"}


def facts(host: str, routed: str, gate: dict = GATE, passed: bool = False) -> dict:
    result = {"passed": True} if passed else FAILED
    return {"sglang_validate_result": result, "sglang_router_replica": routed, "sglang_validate_gate": gate}


def test_the_router_column_names_the_rule_that_kept_a_failing_replica_in() -> None:
    assert host_row("n3", facts("n3", "kept"))["router"].startswith(
        "not taken out (the removal cap (sglang_validate_max_removal_fraction) holds it in): n: probe"
    )
    assert "it is the last healthy replica" in host_row("n4", facts("n4", "kept"))["router"]
    assert host_row("n2", facts("n2", "out"))["router"].startswith("out of the router: n: probe '2+2'")
    suspect = {"hosts": {"n5": {"state": "unchanged", "rule": "suspect-probe"}}, "suspects": ["2+2"]}
    assert "failed probe '2+2' with sound answers: the probe is suspect" in router_cell(
        "kept", FAILED, gate_entry("n5", {"sglang_validate_gate": suspect})
    )


def test_the_failure_words_say_where_the_replica_is_and_which_rule_decided() -> None:
    hostvars = {h: facts(h, r) for h, r in (("n2", "out"), ("n3", "kept"), ("n4", "kept"))}
    hostvars["n1"] = facts("n1", "in", passed=True)
    assert failure_words("n2", hostvars, routed=True) == "Out of the router."
    assert failure_words("n3", hostvars, routed=True).startswith(
        "Not taken out of the router: the removal cap"
    )
    assert failure_words("n2", hostvars, routed=False) == ""
    no_pass = {h: v for h, v in hostvars.items() if h != "n1"}
    assert failure_words("n4", no_pass, routed=True).endswith("No replica checked in this run passed.")
    # Facts of a run before the gate (no sglang_validate_gate): the routing fact alone decides.
    old = {"n1": {"sglang_validate_result": FAILED, "sglang_router_replica": "out"}}
    assert (
        failure_words("n1", old, routed=True) == "Out of the router. No replica checked in this run passed."
    )
    suspect = {"hosts": {"n1": {"state": "unchanged", "rule": "suspect-probe"}}, "suspects": ["2+2"]}
    words = failure_words("n1", {"n1": facts("n1", "kept", suspect)}, routed=True)
    assert "Suspect probe '2+2': every replica judged failed it with otherwise sound answers" in words


def test_a_node_whose_server_never_started_is_failed_at_start_and_out() -> None:
    """Issue 40: a node whose engine stopped at its first NaN in its warm-up fails in serve, before validate:
    its row says so, with the health wait's symptom, and out of the router."""
    from ansible_collections.glm5.deploy.plugins.module_utils.service_start import fail_stop_symptom

    symptom = fail_stop_symptom("RuntimeError: NaN detected! sampler: next_token_logits")
    row = host_row("n1", {"sglang_server_health": {"verdict": "crash-loop", "symptom": symptom}})
    assert row["validated"] == "FAILED at start"
    assert row["router"].startswith("out of the router: the engine stopped at its first NaN"), row
    healthy = host_row("n2", {"sglang_server_health": {"verdict": "healthy"}})
    assert healthy["validated"] == "-" and healthy["router"] == "-", healthy


def test_the_summary_names_an_edge_that_speaks_plain_http() -> None:
    """No silent plain text (issue 41): a router whose edge has no certificate gets a line of its own at the
    end of the summary; one with TLS gets none."""
    PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    routers = {
        "gw": {"sglang_router_edge_plain_http": True, "sglang_router_port": 8080},
        "gw-default-port": {"sglang_router_edge_plain_http": True, "sglang_router_tls_certificate": ""},
        "gw-tls": {"sglang_router_tls_certificate": PEM},
    }
    assert edge_lines(list(routers), routers) == [
        "edge: plain HTTP on port 8080 of gw (sglang_router_edge_plain_http: true)",
        "edge: plain HTTP on port 30000 of gw-default-port (sglang_router_edge_plain_http: true)",
    ]
    assert edge_lines(["gw-tls"], routers) == []
    assert edge_lines([], routers) == []


def test_a_node_left_out_of_the_run_says_why() -> None:
    row = host_row("n7", {**SM120, "glm5_left_out": "preflight: n7 has 4 GPU(s); preflight_tp_size is 8"})
    assert row["validated"] == "LEFT OUT"
    assert row["router"] == "left out of the run: preflight: n7 has 4 GPU(s); preflight_tp_size is 8"


@pytest.mark.parametrize(
    ("result", "verdict"),
    [
        (None, "not judged"),
        ({}, "not judged"),
        ({"skipped": True, "changed": False}, "not judged"),
        ({"passed": True, "probes": []}, "proven"),
        ({"passed": False, "msg": "probe '2+2': NaN"}, "failed"),
        ({"failed": True, "msg": "module crashed"}, "failed"),
    ],
)
def test_one_definition_of_proven(result, verdict) -> None:
    assert validation_verdict(result) == verdict
    assert proven_replicas(["h"], {"h": {"sglang_validate_result": result}}) == (
        ["h"] if verdict == "proven" else []
    )
