"""No user request reaches a node that answers garbage: site.yml proves each replica before routing it, and
the guard (sglang-guard on lab-gateway) keeps judging the answers after the play ends.

1. site.yml with gpu-node-1 on the NaN-poisoned copy (the shared -vvv run, conftest.nan_site): the play fails
   naming that node, the router does not route to it, the other nodes serve.
2. With the lab serving the load generator through the router, gpu-node-1 starts answering garbage
   outside Ansible, without a restart: by hand, its running server loads the NaN copy's weights (sglang's own
   /update_weights_from_disk), so the process, its port and /health stay up all along, the failure that only
   the answers show. The guard takes it out within K intervals, no wrong answer goes through the router from
   then on, the failed-verdict alert fires in the lab's Prometheus, the node rejoins once its healthy weights
   are back, and the router never has fewer than N-1 replicas. (The restart path, a node that starts on the
   NaN copy, is site.yml's in test 1.)
The guard against a rolling update (a held replica is never put back) is proven in molecule/rolling.
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
)

GUARD = "lab-gateway"
MODELS = "/var/lib/sglang/models"
HEALTHY_DIR = f"{MODELS}/glm5-lab-tiny"
NAN_DIR = f"{MODELS}/glm5-lab-tiny-nan"
LOADGEN = "/usr/local/lib/glm5-lab-loadgen"
LOADGEN_FILES = "/var/tmp/glm5-guard-chaos"
# Requests a second through the router while the guard works (as molecule/rolling): back to back, the load
# kept a lab core busy for the whole test (docs/measurements.md, eleventh part).
LOADGEN_RATE = 10
FAIL_AFTER = 2  # sglang_guard_fail_after's default, which the lab keeps
CHECK_SLACK = 3 * 5 + 5  # one check of a server that refuses connections: 3 retries 5 s apart, and a margin


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


def test_site_fails_the_nan_node_and_the_router_does_not_route_to_it(nan_site) -> None:
    run, _ = nan_site
    assert run.status == "failed"
    assert run.count("failures", NAN_NODE) == 1, run.stats
    for host in LAB_NODES:
        if host != NAN_NODE:
            assert run.count("failures", host) == 0, (host, failure(run, host))
    message = failure(run, NAN_NODE)
    assert message.startswith(f"{NAN_NODE}: ") and "Out of the router." in message, message
    assert re.search(r"!!!!|logprob", message), message
    # The probes that reach the broken paths ran, and failed too, each with its symptom: every copy of the
    # concurrent ones, the mid-length recall's copies, the long-context recall (sent once) and both answers of
    # the prefix-reuse recall (the second from the cached prefix).
    assert "probe '2+2': 2 of 2 answers sent at once failed" in message, message
    assert re.search(r"probe 'mid-length': 2 of 2 answers sent at once failed[^|]*(!!!!|logprob)", message)
    assert re.search(r"probe 'long-context': [^|]*(!!!!|logprob)", message), message
    assert re.search(
        r"probe 'prefix-reuse': [^|]*(!!!!|logprob)[^|]*the follow-up on the cached prefix failed: "
        r"[^|]*(!!!!|logprob)",
        message,
    ), message
    verdict = run.results("Ask the model the probes and judge its answers", "runner_on_ok")
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
    # The fleet summary names it out of the router, with the symptom; the others are in.
    lines = next(iter(run.results("Summarize the fleet").values()))["msg"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "FAILED" in rows[NAN_NODE] and "out of the router: " in rows[NAN_NODE], rows[NAN_NODE]
    for host in LAB_NODES:
        if host != NAN_NODE:
            assert rows[host].split()[-1] == "in", rows[host]
    # When the play ends the router does not route to it; the others serve, and its answers pass.
    workers = router_workers()
    assert node_url(NAN_NODE) not in workers, sorted(workers)
    for host in LAB_NODES:
        if host != NAN_NODE:
            assert workers[node_url(host)]["is_healthy"], workers[node_url(host)]
    (through,) = run.results("Ask the probes through the router and judge the answers").values()
    assert through["passed"], through.get("msg")


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
            "--concurrency", "1", "--rate", str(LOADGEN_RATE),
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


def swap_weights(poison: bool) -> float:
    """By hand, outside Ansible: gpu-node-1's running server loads the NaN copy's weights from disk (or the
    healthy ones again) through sglang's /update_weights_from_disk, with the node's admin key (on stdin, on
    no command line: the one key that admin endpoint accepts, test_security.py). No restart: the server keeps
    its port and /health. Returns when the swap was asked."""
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
    assert shown.returncode == 0 and json.loads(shown.stdout)["success"], (shown.stdout, shown.stderr[-2000:])
    return at


@pytest.mark.restores_nan_node
def test_the_guard_takes_a_garbage_node_out_and_puts_it_back(nan_site, loadgen, tmp_path, capsys) -> None:
    restore_nan_node(tmp_path, always=True)
    workers = router_workers()
    assert all(workers.get(node_url(h), {}).get("is_healthy") for h in LAB_NODES), workers
    interval = guard_interval()
    victim = node_url(NAN_NODE)
    cpu_before = guard_cpu_seconds()
    server_pid = lab(NAN_NODE, "systemctl show sglang -p MainPID --value").stdout.strip()
    test_started = time.time()
    poisoned = swap_weights(poison=True)
    try:
        wait_for(
            "the guard to take the node out", lambda: victim not in router_workers(), 10 * interval + 120
        )
        journal = guard_journal(poisoned - 1)
        fails = [t for t, line in journal if "verdict" in line and victim in line and "result=fail" in line]
        outs = [t for t, line in journal if f"transition replica={victim} out " in line]
        assert fails and outs, journal[-20:]
        # Out on its K-th failed verdict in a row, one check per interval: within K intervals of the fault,
        # each stretched by what one check of a restarting server may take (a refused connection is retried
        # 3 times, 5 s apart, as the inference check does; a check that outlasts the interval skips a tick).
        assert len([t for t in fails if t <= outs[0]]) == FAIL_AFTER, (fails[:4], outs[0])
        assert outs[0] - poisoned <= FAIL_AFTER * (interval + CHECK_SLACK), (poisoned, fails[:3], outs[0])
        # Once it serves again, on the NaN copy, the guard judges the content itself, not only liveness.
        garbage = wait_for(
            "a verdict on the NaN copy's answers",
            lambda: [
                line
                for _, line in guard_journal(poisoned - 1)
                if victim in line and "result=fail" in line and re.search(r"!!!!|logprob|degenerate", line)
            ],
            240,
            every=2,
        )
        # The failed-verdict alert fires in the lab's Prometheus.
        wait_for(
            "GLM5FailedVerdict firing for the node",
            lambda: [
                a
                for a in alerts()
                if a["labels"].get("alertname") == "GLM5FailedVerdict"
                and a["labels"].get("replica") == victim
                and a["state"] == "firing"
            ],
            120,
            every=2,
        )
        assert victim not in router_workers()
    finally:
        fixed = swap_weights(poison=False)
    wait_for(
        "the node back in the router, healthy",
        lambda: router_workers().get(victim, {}).get("is_healthy"),
        240 + 6 * interval,
        every=2,
    )
    back = guard_journal(fixed - 1)
    ins = [t for t, line in back if f"transition replica={victim} in " in line]
    assert ins, back[-20:]
    # The same server process all along: only its answers told the guard.
    assert lab(NAN_NODE, "systemctl show sglang -p MainPID --value").stdout.strip() == server_pid
    report = loadgen()

    assert report["requests"] > 0, report
    start = report["started_epoch"]
    wrong_after = [s for s in report["failure_at_s"] if start + s >= outs[0]]
    assert wrong_after == [], (wrong_after, report["failures"])
    assert report["min_healthy_workers"] >= len(LAB_NODES) - 1, report["healthy_timeline"]

    # The numbers for docs/benchmarks.md (measured, not asserted).
    cpu_after = guard_cpu_seconds()
    wall = time.time() - test_started
    wrong_before = [s for s in report["failure_at_s"] if start + s < outs[0]]
    first_wrong = start + wrong_before[0] if wrong_before else None
    numbers = {
        "interval_s": interval,
        "first_failed_verdict_to_out_s": round(outs[0] - fails[0], 1),
        "poisoned_to_out_intervals": round((outs[0] - poisoned) / interval, 2),
        "first_wrong_answer_to_out_s": round(outs[0] - first_wrong, 1) if first_wrong else None,
        "poisoned_to_out_s": round(outs[0] - poisoned, 1),
        "fixed_to_in_s": round(ins[0] - fixed, 1),
        "requests": report["requests"],
        "wrong_answers_before_out": len(wrong_before),
        "wrong_answers_after_out": len(wrong_after),
        "min_replicas_in_router": report["min_healthy_workers"],
        "guard_cpu_s_per_hour": round((cpu_after - cpu_before) / wall * 3600, 1),
        "garbage_verdict": garbage[0][:200],
    }
    out = ROOT / ".ansible" / "guard-numbers.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(numbers, indent=1) + "\n")
    with capsys.disabled():
        print(f"\nguard: {json.dumps(numbers)}")


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
