"""No user request reaches a node that answers garbage (issue 40: zero garbage to users). The lab's engines
stop at their first NaN (the fail-stop every profile turns on, lanes.yml nan_fail_stop), the router drops a
stopped replica within seconds and retries its requests elsewhere, and the guard (sglang-guard on lab-gateway)
puts a replica back only after M passes.

1. site.yml with gpu-node-1 on the NaN-poisoned copy (the shared -vvv run, conftest.nan_site): the node's
   engine stops in its warm-up, the play fails it at its start naming the NaN line, the router does not route
   to it, the unit ends failed after its start limit, and the guard's alert fires; the other nodes serve.
2. With 4 clients through the edge, gpu-node-1's running server loads the NaN copy's weights by hand
   (sglang's own /update_weights_from_disk, no restart): its engine stops at the first NaN, the router drops
   it within 2 s, no wrong answer reaches a client, systemd restarts it, and the guard puts it back.
The guard's own judgement of garbage answers (a fail-stop turned off) is proven in molecule/validate (the
Inf copy on a server without the fail-stop), and in the guard's unit tests against real NaN answers; the guard
against a rolling update (a held replica is never put back) in molecule/rolling.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable

import pytest
from conftest import (
    LAB_NODES,
    NAN_NODE,
    ROOT,
    ROUTER_CA,
    ROUTER_URL,
    SECRETS,
    TLS_NODE,
    Run,
    lab,
    node_url,
    restore_nan_node,
    router_workers,
    run_playbook_in,
)

GUARD = "lab-gateway"
MODELS = "/var/lib/sglang/models"
HEALTHY_DIR = f"{MODELS}/glm5-lab-tiny"
NAN_DIR = f"{MODELS}/glm5-lab-tiny-nan"
LOADGEN = "/usr/local/lib/glm5-lab-loadgen"
LOADGEN_FILES = "/var/tmp/glm5-guard-chaos"
# Requests a second through the router while the guard works (as molecule/rolling): back to back, the load
# kept a lab core busy for the whole test (docs/journal/measurements.md, eleventh part).
LOADGEN_RATE = 10
# Issue 40: at least 4 clients at once through the edge; the router's view polled 5 times a second.
LOADGEN_CONCURRENCY = 4
LOADGEN_POLL = 0.2


def wait_for(what: str, check: Callable[[], object], timeout: float, every: float = 1.0) -> object:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(every)


def guard_interval() -> float:
    return float(json.loads(lab(GUARD, "cat /etc/sglang-guard/guard.json").stdout)["interval"])


def guard_journal(since: float) -> list[tuple[float, str]]:
    """The guard's journal lines since ``since`` (epoch seconds), with their times."""
    shown = lab(GUARD, f"journalctl -u sglang-guard --no-pager -o short-unix --since @{since:.0f}").stdout
    lines = []
    for line in shown.splitlines():
        stamp, _, text = line.partition(" ")
        try:
            lines.append((float(stamp), text))
        except ValueError:
            continue
    return lines


def guard_cpu_seconds() -> float:
    """The guard process's CPU seconds so far (its own process_cpu_seconds_total metric)."""
    shown = lab(
        GUARD,
        'python3 -c "import urllib.request; print(urllib.request.urlopen('
        "'http://127.0.0.1:29100/metrics', timeout=10).read().decode())\"",
    ).stdout
    match = re.search(r"^process_cpu_seconds_total ([0-9.e+]+)$", shown, re.M)
    assert match, shown[:2000]
    return float(match.group(1))


def router_retries() -> float:
    """The attempts smg has retried so far (its smg_worker_retries_total, all endpoints)."""
    shown = lab(
        GUARD,
        'python3 -c "import urllib.request; print(urllib.request.urlopen('
        "'http://127.0.0.1:29000/metrics', timeout=10).read().decode())\"",
    ).stdout
    return sum(float(m) for m in re.findall(r"^smg_worker_retries_total\{[^}]*\} ([0-9.e+]+)$", shown, re.M))


def alerts() -> list[dict]:
    """The alerts of the lab's Prometheus on lab-gateway (its HTTP API, on loopback there)."""
    shown = lab(
        GUARD,
        'python3 -c "import urllib.request; print(urllib.request.urlopen('
        "'http://127.0.0.1:9090/api/v1/alerts', timeout=10).read().decode())\"",
    ).stdout
    return json.loads(shown)["data"]["alerts"]


def failure(run: Run, host: str) -> str:
    return "\n".join(
        str(e["event_data"]["res"].get("msg", ""))
        for e in run.events
        if e.get("event") == "runner_on_failed" and e["event_data"].get("host") == host
    )


def test_site_fails_the_nan_node_at_its_start_and_the_router_does_not_route_to_it(nan_site) -> None:
    """Issue 40: the NaN node's engine stops at its first NaN (the lab's fail-stop, as every profile's), in
    its warm-up: it never serves a token. site.yml fails it at its start, naming the symptom and the journal
    line; the router does not route to it, the unit ends failed after its start limit, the guard's alert
    fires."""
    run, started = nan_site
    assert run.status == "failed"
    assert run.count("failures", NAN_NODE) == 1, run.stats
    for host in LAB_NODES:
        if host != NAN_NODE:
            assert run.count("failures", host) == 0, (host, failure(run, host))
    failed = run.results("Fail with the symptom and the journal of the unhealthy service", "runner_on_failed")
    message = failed[NAN_NODE]["msg"]
    assert message.startswith(
        f"sglang on {NAN_NODE} did not become healthy: the engine stopped at its first NaN"
    )
    assert "NaN detected! sampler: next_token_logits" in message, message
    (health,) = run.results("Wait until /health_generate answers 200 (a GLM-5 start takes 7-8 minutes)",
                            "runner_on_failed").values()  # fmt: skip
    assert health["verdict"] == "crash-loop" and "NaN detected!" in health["fail_stop_line"], health
    verdict = run.results("Ask the model the probes and judge its answers", "runner_on_ok")
    assert NAN_NODE not in verdict, "the stopped node was never asked"
    healthy = next(verdict[host] for host in LAB_NODES if host != NAN_NODE)
    probes = {probe["name"]: probe for probe in healthy["probes"]}
    long = probes["long-context"]
    assert long["passed"] and "answers" not in long, long
    assert (probes["2+2"]["answers"], probes["2+2"]["failed_answers"]) == (2, 0), probes["2+2"]
    # A healthy node passes the two recall probes of issue 39: the mid-length one at the concurrency, and the
    # prefix-reuse one twice in a row, the follow-up agreeing with the first answer.
    assert (probes["mid-length"]["answers"], probes["mid-length"]["failed_answers"]) == (2, 0)
    reuse = probes["prefix-reuse"]
    assert reuse["passed"] and (reuse["answers"], reuse["failed_answers"]) == (2, 0), reuse
    assert reuse["content"].strip() == reuse["follow_up_content"].strip(), reuse
    # The fleet summary names it failed at its start and out of the router, with the journal's NaN line.
    lines = next(iter(run.results("Summarize the fleet").values()))["msg"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "FAILED" in rows[NAN_NODE] and "out of the router: " in rows[NAN_NODE], rows[NAN_NODE]
    assert "first NaN" in rows[NAN_NODE], rows[NAN_NODE]
    for host in LAB_NODES:
        if host != NAN_NODE:
            assert rows[host].split()[-1] == "in", rows[host]
    # The router does not route to it (its health check at once, then the guard takes it out); the others
    # serve, and its answers pass.
    victim = node_url(NAN_NODE)
    wait_for(
        "the NaN node out of the router", lambda: not router_workers().get(victim, {}).get("is_healthy"), 60
    )
    workers = router_workers()
    for host in LAB_NODES:
        if host != NAN_NODE:
            assert workers[node_url(host)]["is_healthy"], workers[node_url(host)]
    (through,) = run.results("Ask the probes through the router and judge the answers").values()
    assert through["passed"], through.get("msg")
    # The failed-verdict alert fires in the lab's Prometheus for the stopped replica.
    wait_for(
        "GLM5FailedVerdict firing for the NaN node",
        lambda: [
            a
            for a in alerts()
            if a["labels"].get("alertname") == "GLM5FailedVerdict"
            and a["labels"].get("replica") == victim
            and a["state"] == "firing"
        ],
        180,
        every=2,
    )
    # Each start stops at the first NaN again: systemd gives up after the start limit (the lab's burst of 2)
    # and the unit stays failed, out of the router, until an operator or a playbook starts a fixed one.
    wait_for(
        "the NaN node's unit failed after its start limit",
        lambda: "ActiveState=failed" in lab(NAN_NODE, "systemctl show sglang -p ActiveState").stdout,
        180,
        every=2,
    )
    shown = lab(NAN_NODE, f"journalctl -u sglang --no-pager -o cat --since @{started:.0f}").stdout
    assert shown.count("NaN detected! sampler: next_token_logits") >= 2, shown[-3000:]
    assert "Start request repeated too quickly" in shown, shown[-3000:]


@pytest.fixture
def loadgen() -> Callable[[], dict]:
    """The lab's load generator on lab-gateway through the router (loopback); the returned call stops it and
    gives its report (requests, failures with their times, the router's healthy-worker timeline)."""
    lab(GUARD, f"rm -f {LOADGEN_FILES}.stop {LOADGEN_FILES}.json")
    subprocess.run(
        ["podman", "cp", str(ROOT / "lab" / "bin" / "loadgen"), f"glm5-lab-{GUARD}:{LOADGEN}"], check=True
    )
    subprocess.run(
        [
            "podman", "exec", "-d", f"glm5-lab-{GUARD}", LOADGEN,
            "--url", ROUTER_URL, "--ca", ROUTER_CA,
            "--admin-key", SECRETS["sglang_router_admin_key"],
            "--api-key", SECRETS["sglang_router_api_key"],
            "--concurrency", str(LOADGEN_CONCURRENCY), "--rate", str(LOADGEN_RATE),
            "--poll", str(LOADGEN_POLL),
            "--max-requests", "100000", "--max-seconds", "900", "--max-tokens", "64",
            "--stop-file", f"{LOADGEN_FILES}.stop", "--out", f"{LOADGEN_FILES}.json",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    stopped = False

    def stop() -> dict:
        nonlocal stopped
        stopped = True
        lab(GUARD, f"touch {LOADGEN_FILES}.stop")
        wait_for("the load generator's report", lambda: lab(GUARD, f"test -s {LOADGEN_FILES}.json", False)
                 .returncode == 0, 180)  # fmt: skip
        return json.loads(lab(GUARD, f"cat {LOADGEN_FILES}.json").stdout)

    yield stop
    if not stopped:
        lab(GUARD, f"touch {LOADGEN_FILES}.stop")


def swap_weights(poison: bool, may_fail: bool = False) -> float:
    """By hand, outside Ansible: gpu-node-1's running server loads the NaN copy's weights from disk (or the
    healthy ones again) through sglang's /update_weights_from_disk, with the node's admin key (on stdin, on
    no command line: the one key that admin endpoint accepts, test_security.py). No restart: the server keeps
    its port and /health. Returns when the swap was asked. With ``may_fail`` the answer is not judged: an
    engine that stops at its first NaN may stop before it answers."""
    script = (
        "import json, sys, urllib.request;"
        f"r = urllib.request.Request('{node_url(NAN_NODE)}/update_weights_from_disk',"
        " data=json.dumps({'model_path': sys.argv[1]}).encode(),"
        " headers={'Authorization': 'Bearer ' + sys.stdin.read().strip(),"
        " 'Content-Type': 'application/json'});"
        "print(urllib.request.urlopen(r, timeout=300).read().decode())"
    )
    at = time.time()
    weights = NAN_DIR if poison else HEALTHY_DIR
    shown = subprocess.run(
        ["podman", "exec", "-i", f"glm5-lab-{NAN_NODE}", "python3", "-c", script, weights],
        input=SECRETS["sglang_server_admin_api_key"],
        capture_output=True,
        text=True,
    )
    if not may_fail:
        assert shown.returncode == 0 and json.loads(shown.stdout)["success"], (
            shown.stdout,
            shown.stderr[-2000:],
        )
    return at


def load_numbers(report: dict, interval: float) -> dict:
    """What docs/benchmarks.md P6 shows of a load generator's run, in both of its scenarios."""
    return {
        "clients": LOADGEN_CONCURRENCY,
        "rate_per_s": LOADGEN_RATE,
        "guard_interval_s": interval,
        "requests": report["requests"],
        "wrong_answers": report["wrong_answers"],
        "failed_requests": report["failed_requests"],
    }


def router_out_at(report: dict, url: str, after: float) -> float | None:
    """When (epoch seconds) the router first stopped listing ``url`` as healthy after ``after``, from the load
    generator's timeline of the healthy workers (polled every LOADGEN_POLL seconds)."""
    start = report["started_epoch"]
    for at, urls in report["healthy_urls_timeline"]:
        if start + at >= after and url not in [u.rstrip("/") for u in urls]:
            return start + at
    return None


def router_in_again_at(report: dict, url: str, after: float) -> float | None:
    """When the router first listed ``url`` as healthy again after ``after``."""
    start = report["started_epoch"]
    for at, urls in report["healthy_urls_timeline"]:
        if start + at > after and url in [u.rstrip("/") for u in urls]:
            return start + at
    return None


@pytest.mark.restores_nan_node
def test_a_node_whose_weights_turn_nan_stops_and_no_client_gets_a_wrong_answer(
    nan_site, loadgen, tmp_path, capsys
) -> None:
    """Issue 40: with 4 clients through the edge, gpu-node-1's running server loads the NaN copy's weights.
    Its engine stops at the first NaN (the fail-stop), the router drops it within 2 s and retries its requests
    on gpu-node-2: no wrong answer reaches a client, and every failed request is counted. systemd restarts the
    server (on its healthy checkpoint), and only the guard's M passes put it back in the router."""
    restore_nan_node(tmp_path, always=True)
    workers = router_workers()
    assert all(workers.get(node_url(h), {}).get("is_healthy") for h in LAB_NODES), workers
    interval = guard_interval()
    victim = node_url(NAN_NODE)
    restarts = int(lab(NAN_NODE, "systemctl show sglang -p NRestarts --value").stdout.strip() or 0)
    cpu_before = guard_cpu_seconds()
    retries_before = router_retries()
    test_started = time.time()
    poisoned = swap_weights(poison=True, may_fail=True)
    # The engine stopped: systemd counts a restart, the journal has the NaN assert's line.
    wait_for(
        "the poisoned server's engine to stop and systemd to restart it",
        lambda: (
            int(lab(NAN_NODE, "systemctl show sglang -p NRestarts --value").stdout.strip() or 0) > restarts
        ),
        60,
        every=0.5,
    )
    journal = lab(
        NAN_NODE, f"journalctl -u sglang --no-pager -o short-unix --since @{poisoned - 1:.0f}"
    ).stdout
    nan_lines = [line for line in journal.splitlines() if "NaN detected! sampler: next_token_logits" in line]
    assert nan_lines, journal[-3000:]
    # The guard takes it out of the router (the router's health check saw it first), and puts it back only
    # after M passes of the restarted server.
    wait_for(
        "the guard to put the restarted node back",
        lambda: [t for t, line in guard_journal(poisoned - 1) if f"transition replica={victim} in " in line],
        240 + 6 * interval,
        every=2,
    )
    wait_for("the node healthy in the router", lambda: router_workers().get(victim, {}).get("is_healthy"), 60)
    guard_lines = guard_journal(poisoned - 1)
    outs = [t for t, line in guard_lines if f"transition replica={victim} out " in line]
    ins = [t for t, line in guard_lines if f"transition replica={victim} in " in line]
    assert outs and ins and outs[0] < ins[0], guard_lines[-20:]
    report = loadgen()

    assert report["requests"] > 0, report
    # Not one wrong answer reached a client: the engine stopped before it sampled a token from NaN logits.
    assert report["wrong_answers"] == 0, report["failures"]
    # The router stopped routing to it within 2 s of the fault (its health check every second; the loadgen's
    # view is polled every LOADGEN_POLL s), and the other replica served all along.
    out_at = router_out_at(report, victim, poisoned)
    assert out_at is not None, report["healthy_urls_timeline"]
    assert out_at - poisoned <= 2.0 + LOADGEN_POLL, (poisoned, report["healthy_urls_timeline"])
    assert report["min_healthy_workers"] >= len(LAB_NODES) - 1, report["healthy_timeline"]
    # Back only by the guard: the router did not route to the restarted server before the guard's M passes.
    back_at = router_in_again_at(report, victim, out_at)
    assert back_at is None or back_at >= ins[0] - LOADGEN_POLL, (
        back_at,
        ins[0],
        report["healthy_urls_timeline"],
    )
    assert lab(NAN_NODE, "systemctl is-active sglang", check=False).stdout.strip() == "active"

    # The numbers for docs/benchmarks.md (measured, not asserted beyond the above).
    cpu_after = guard_cpu_seconds()
    wall = time.time() - test_started
    numbers = {
        **load_numbers(report, interval),
        "router_retries": int(router_retries() - retries_before),
        "fault_to_nan_line_s": round(float(nan_lines[0].split()[0]) - poisoned, 2),
        "fault_to_router_out_s": round(out_at - poisoned, 2),
        "fault_to_guard_out_s": round(outs[0] - poisoned, 1),
        "fault_to_back_in_s": round(ins[0] - poisoned, 1),
        "latency_p99_s": report["latency_p99_s"],
        "latency_max_s": report["latency_max_s"],
        "min_replicas_in_router": report["min_healthy_workers"],
        "guard_cpu_s_per_hour": round((cpu_after - cpu_before) / wall * 3600, 1),
    }
    out = ROOT / ".ansible" / "fail-stop-numbers.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(numbers, indent=1) + "\n")
    with capsys.disabled():
        print(f"\nfail-stop: {json.dumps(numbers)}")


@pytest.mark.bench
def test_the_guard_alone_takes_a_garbage_node_out_and_puts_it_back(loadgen, tmp_path, capsys) -> None:
    """The guard without the fail-stop (docs/benchmarks.md P6, beside the fail-stop's numbers; not in make
    test): gpu-node-1 served again with sglang_nan_fail_stop_off, so that its engine answers NaN garbage with
    /health green; the same 4 clients as the fail-stop test. The guard takes it out after K failed verdicts,
    no wrong answer reaches a client once it is out, and it comes back after M passes once its healthy weights
    are back. The node is served from the inventory again afterwards (fail-stop on)."""
    run = run_playbook_in(
        tmp_path, "playbooks/serve.yml", cmdline=f"--limit {NAN_NODE}",
        extravars={"sglang_nan_fail_stop_off": {"cpu": "docs/benchmarks.md P6: the guard alone"}},
    )  # fmt: skip
    assert run.status == "successful", run.stats
    try:
        interval = guard_interval()
        victim = node_url(NAN_NODE)
        server_pid = lab(NAN_NODE, "systemctl show sglang -p MainPID --value").stdout.strip()
        poisoned = swap_weights(poison=True)
        try:
            wait_for(
                "the guard to take the node out", lambda: victim not in router_workers(), 10 * interval + 120
            )
            journal = guard_journal(poisoned - 1)
            fails = [
                t for t, line in journal if "verdict" in line and victim in line and "result=fail" in line
            ]
            outs = [t for t, line in journal if f"transition replica={victim} out " in line]
            assert fails and outs, journal[-20:]
        finally:
            fixed = swap_weights(poison=False)
        wait_for(
            "the node back in the router, healthy",
            lambda: router_workers().get(victim, {}).get("is_healthy"),
            240 + 6 * interval,
            every=2,
        )
        ins = [t for t, line in guard_journal(fixed - 1) if f"transition replica={victim} in " in line]
        assert ins, guard_journal(fixed - 1)[-20:]
        # The same server process all along: only its answers told the guard.
        assert lab(NAN_NODE, "systemctl show sglang -p MainPID --value").stdout.strip() == server_pid
        report = loadgen()
    finally:
        restore_nan_node(tmp_path, always=True)
    start = report["started_epoch"]
    wrong_after = [s for s in report["wrong_at_s"] if start + s >= outs[0]]
    assert wrong_after == [], (wrong_after, report["failures"])
    numbers = {
        **load_numbers(report, interval),
        "fault_to_guard_out_s": round(outs[0] - poisoned, 1),
        "first_failed_verdict_to_out_s": round(outs[0] - fails[0], 1),
        "fixed_to_in_s": round(ins[0] - fixed, 1),
        "min_replicas_in_router": report["min_healthy_workers"],
    }
    out = ROOT / ".ansible" / "guard-alone-numbers.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(numbers, indent=1) + "\n")
    with capsys.disabled():
        print(f"\nguard alone: {json.dumps(numbers)}")


def test_the_lab_prometheus_runs_the_roles_configuration_and_scrapes_everything() -> None:
    """The configuration sglang_monitoring wrote on lab-gateway passes `promtool check config`, and the lab's
    real Prometheus scrapes every node, the router and the guard, with the rules loaded."""
    checked = lab(GUARD, "promtool check config /etc/prometheus/prometheus.yml", check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    script = (
        "import json, urllib.request;"
        "get = lambda p: json.load(urllib.request.urlopen('http://127.0.0.1:9090/api/v1/' + p, timeout=10));"
        "print(json.dumps([get('targets'), get('rules')]))"
    )
    targets, rules = json.loads(lab(GUARD, f'python3 -c "{script}"').stdout)
    up = {(t["labels"]["job"], t["health"]) for t in targets["data"]["activeTargets"]}
    jobs = {job for job, _ in up}
    assert {"glm5-sglang", "glm5-router", "glm5-guard"} <= jobs, up
    # TLS from the router to the nodes: Prometheus scrapes gpu-node-2 over https, verified by the nodes' CA.
    scraped = {t["scrapeUrl"]: t for t in targets["data"]["activeTargets"]}
    tls_target = scraped.get(f"{node_url(TLS_NODE)}/metrics", {})
    assert tls_target.get("health") != "down" and "lastError" in tls_target, sorted(scraped)
    assert not tls_target["lastError"], tls_target["lastError"]
    names = {r["name"] for group in rules["data"]["groups"] for r in group["rules"]}
    assert {"GLM5FailedVerdict", "GLM5ReplicaOutOfRouter", "GLM5NoHealthyReplica"} <= names, names
    # The shipped scrape configuration, loaded with no hand edit: every glm5 target came from the target
    # lists the role writes (file_sd, re-read by Prometheus itself), and glm5-scrape.yml is a valid
    # configuration of its own (what scrape_config_files includes on Prometheus 2.43+).
    glm5 = [t for t in targets["data"]["activeTargets"] if t["labels"]["job"].startswith("glm5-")]
    sources = {(t["labels"]["job"], t["discoveredLabels"].get("__meta_filepath")) for t in glm5}
    assert sources == {(job, f"/etc/prometheus/glm5/targets/{job}.json") for job, _ in sources}, sources
    alone = lab(GUARD, "promtool check config /etc/prometheus/glm5/glm5-scrape.yml", check=False)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    # Every alert says where its runbook is.
    alerts = [r for group in rules["data"]["groups"] for r in group["rules"] if r["type"] == "alerting"]
    assert alerts and all("docs/runbooks.md#" in r["annotations"].get("runbook_url", "") for r in alerts), [
        r["name"] for r in alerts if "runbook_url" not in r["annotations"]
    ]
