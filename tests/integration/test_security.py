"""Secrets and hardening on the converged lab: keys never leak, files and users are locked down, the units'
systemd exposure stays at or below 4.0, and the server is only reachable where it should be.

The lab's keys are lab values (inventory/lab/group_vars), handled by the roles exactly like vault values.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from urllib.parse import urlsplit

import pytest
from conftest import (
    FIREWALL_LOAD_TASK,
    FLUSHED_NODE,
    LAB_NODES,
    LEAK_PATTERNS,
    NAN_NODE,
    RELEASE_SCAN,
    RELEASES,
    ROOT,
    ROUTER_CA,
    ROUTER_URL,
    SECRETS,
    TUNE_NODE,
    Run,
    grep_world_readable,
    http_from,
    lab,
    leaks,
    restore_nan_node,
    router_admin,
    router_workers,
)

# Since issue 40 the NaN site run leaves NAN_NODE's engine stopped (its fail-stop), not serving garbage, and
# these tests look at every node's live server: conftest's ordering runs them after the test that serves it
# from the inventory again (restores_nan_node), and each makes sure of it first (a no-op then).
pytestmark = pytest.mark.after_nan_node_restored


@pytest.fixture(autouse=True)
def nan_node_serving(tmp_path_factory: pytest.TempPathFactory) -> None:
    """NAN_NODE serves the inventory's model (restore_nan_node: only when its unit names the NaN copy)."""
    restore_nan_node(tmp_path_factory.mktemp("nan-node-serving"))


UNITS = {
    "sglang.service": LAB_NODES,
    "sglang-router.service": ("lab-gateway",),
    "sglang-guard.service": ("lab-gateway",),
    "sglang-edge.service": ("lab-gateway",),
}
MAX_EXPOSURE = 4.0
# A worker the inventory does not have, for router.yml to prune: gpu-node-1's server under its container's
# name (it answers, so the router lists it at once).
STRAY_WORKER = "http://glm5-lab-gpu-node-1:30000"
PRUNE_TASK = "Remove workers the inventory no longer has"


@pytest.fixture(scope="module")
def verbose_run(nan_site) -> tuple[Run, float]:
    """site.yml at -vvv on the converged fleet, and when it started: every task that handles a key runs, and
    with one node on the NaN copy (conftest.nan_site, shared with test_serving_safety) the failure path too:
    its checkpoint download, its restart, its engine's stop at its first NaN and the failed start."""
    run, started = nan_site
    assert run.status == "failed" and set(run.stats.get("failures", {})) == {NAN_NODE}, run.stats
    return run, started


def test_the_secrets_are_set_in_the_lab() -> None:
    assert all(SECRETS.values()), "a lab secret is empty: the leak checks would prove nothing"


def test_no_secret_in_verbose_output(verbose_run) -> None:
    run, _ = verbose_run
    assert len(run.stdout) > 100_000, "the -vvv output is missing"
    assert leaks(run.stdout) == []
    assert leaks(json.dumps(run.events)) == []


def scan(adhoc, command: str) -> dict[str, list[str]]:
    """Run ``command`` on every lab host with the secrets in a root-only patterns file (LEAK_PATTERNS, put
    there through copy's no_log content, so no command line and no journal entry carries them); returns each
    host's output lines, which the command limits to hits."""
    content = "\n".join(SECRETS.values()) + "\n"
    args = json.dumps({"dest": LEAK_PATTERNS, "mode": "0600", "content": content})
    adhoc("lab", "ansible.builtin.copy", args)
    found = adhoc("lab", "ansible.builtin.shell", f"{command}; rm -f {LEAK_PATTERNS}")
    assert set(found) == {*LAB_NODES, "lab-gateway"}
    for host, res in found.items():
        assert "stdout_lines" in res, (host, sorted(res))
    return {host: res["stdout_lines"] for host, res in found.items() if res["stdout_lines"]}


def test_the_scan_finds_a_planted_secret(adhoc) -> None:
    """The control: a world-readable file that holds the router admin key is found, on that host only; and one
    written into gpu-node-1's release tree after the early scan is found by the world-readable scan."""
    planted = "/var/tmp/glm5-planted-secret"
    content = f"key={SECRETS['sglang_router_admin_key']}\n"
    args = {"dest": planted, "mode": "0644", "content": content}
    adhoc("lab-gateway", "ansible.builtin.copy", json.dumps(args))
    in_release = lab("gpu-node-1", "readlink -f /opt/sglang/current").stdout.strip() + "/glm5-planted-secret"
    assert in_release.startswith(f"{RELEASES}/"), in_release
    adhoc("gpu-node-1", "ansible.builtin.copy", json.dumps({**args, "dest": in_release}))
    try:
        hits = scan(
            adhoc, f"grep -rlFf {LEAK_PATTERNS} /var/tmp 2>/dev/null || true; {grep_world_readable(RELEASES)}"
        )
    finally:
        adhoc("lab-gateway", "ansible.builtin.file", f"path={planted} state=absent")
        adhoc("gpu-node-1", "ansible.builtin.file", f"path={in_release} state=absent")
    assert hits == {"lab-gateway": [planted], "gpu-node-1": [in_release]}


def test_no_secret_in_world_readable_files(adhoc) -> None:
    """Every world-readable regular file on every lab host's root filesystem; big binaries are skipped. The
    release trees' files were scanned when the session started (conftest.scan_release_trees); here, under
    RELEASES, only those created or changed since then are read again."""
    assert sorted(RELEASE_SCAN) == sorted(LAB_NODES), "the release trees were not scanned"
    assert {host: [] for host in LAB_NODES} == RELEASE_SCAN, RELEASE_SCAN
    hits = scan(adhoc, grep_world_readable())
    assert hits == {}


def test_no_secret_in_systemctl_show_or_the_process_list(adhoc) -> None:
    """What any local user can read: the units' properties, the manager's environment, every process's
    command line (the keys reach sglang through --config and smg through its environment, never argv)."""
    shown = adhoc(
        "lab",
        "ansible.builtin.shell",
        "systemctl show sglang.service sglang-router.service sglang-guard.service sglang-edge.service; "
        "systemctl show-environment; "
        'runuser -u nobody -- sh -c \'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " "\'',
    )
    for host, res in shown.items():
        assert "ExecStart" in res["stdout"], host
        assert leaks(res["stdout"]) == [], host


def test_no_secret_in_the_journal_of_the_run_or_the_running_services(verbose_run, adhoc) -> None:
    """Modules log their arguments to the journal unless no_log; sglang logs its server_args on start."""
    _, started = verbose_run
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started - 5))
    hits = scan(
        adhoc,
        f"{{ TZ=UTC journalctl --no-pager -o cat --since '{since}'; "
        "for u in sglang sglang-router sglang-guard; do id=$(systemctl show $u -p InvocationID --value); "
        '[ -z "$id" ] || journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID=$id; done; } '
        f"| grep -Ff {LEAK_PATTERNS} | cut -c1-300 || true",
    )
    assert hits == {}


@pytest.mark.beside_nan_node_faults
def test_no_secret_in_a_tune_run_or_its_report(tune_beside) -> None:
    """playbooks/tune.yml at -vvv on gpu-node-2 with one candidate, the inventory's own settings (nothing to
    switch, one real benchmark against the node directly, with the server key): no key in its output, its
    events, or any file of the report it writes (sglang's benchmark saves the server's /server_info). The run
    is conftest.tune_beside's, made while the crash loop and the stalled start break gpu-node-1."""
    future, reports = tune_beside
    run = future.result(timeout=1200)
    assert run.status == "successful", run.stats
    assert len(run.stdout) > 100_000, "the -vvv output is missing"
    assert leaks(run.stdout) == [] and leaks(json.dumps(run.events)) == []
    files = [f for f in reports.rglob("*") if f.is_file()]
    assert files, "tune wrote no report"
    kept = run.custom_stats()["glm5_tune"][TUNE_NODE]  # set_stats: what an AWX job keeps
    assert kept["best"] == "inventory" and str(reports) in kept["reports"], kept
    assert {f.name: leaks(f.read_text(errors="replace")) for f in files} == {f.name: [] for f in files}


def test_no_secret_in_router_or_validate_runs_and_router_prunes_a_stray_worker(run_playbook) -> None:
    """playbooks/router.yml at -vvv with a worker to prune (its DELETE carries the router's admin key), then
    playbooks/validate.yml on its own at -vvv (the probes carry the server key, the re-registration the admin
    key): no key in their output or events. The router no longer lists the stray worker. The only failed host
    allowed is the NaN node, when conftest.nan_site has it on the poisoned copy."""
    router_admin("/workers", {"url": STRAY_WORKER, "api_key": SECRETS["sglang_server_api_key"]})
    deadline = time.monotonic() + 60
    while STRAY_WORKER not in router_workers() and time.monotonic() < deadline:
        time.sleep(1)
    assert STRAY_WORKER in router_workers(), f"the router never listed {STRAY_WORKER}: nothing to prune"
    router = run_playbook("playbooks/router.yml", verbosity=3)
    validate = run_playbook("playbooks/validate.yml", verbosity=3)
    for run in (router, validate):
        assert set(run.stats.get("failures", {})) <= {NAN_NODE}, run.stats
        # -vvv's own lines (validate.yml routes the fleet in one task now: its output is about 40 kB, not 50).
        assert "ESTABLISH " in run.stdout and "task path: " in run.stdout, "the -vvv output is missing"
        assert leaks(run.stdout) == [] and leaks(json.dumps(run.events)) == []
    # no_log hides the item's result (and its `changed`); the item's event and the host's count remain.
    pruned = [
        e
        for e in router.events
        if e.get("event") == "runner_item_on_ok" and e["event_data"].get("task") == PRUNE_TASK
    ]
    assert len(pruned) == 1 and router.stats["changed"].get("lab-gateway", 0) >= 1, router.stats
    assert STRAY_WORKER not in router_workers()


def test_env_files_are_root_only(adhoc) -> None:
    modes = adhoc("sglang_nodes", "ansible.builtin.stat", "path=/etc/sglang/sglang.env")
    modes.update(adhoc("sglang_router", "ansible.builtin.stat", "path=/etc/sglang-router/router.env"))
    guard = adhoc("sglang_router", "ansible.builtin.stat", "path=/etc/sglang-guard/guard.env")
    modes.update({f"{host} (guard)": res for host, res in guard.items()})
    for host, res in modes.items():
        stat = res["stat"]
        assert (stat["mode"], stat["pw_name"], stat["gr_name"]) == ("0600", "root", "root"), host


def test_the_service_users_are_system_users_without_a_login_shell(adhoc) -> None:
    users = adhoc("sglang_nodes", "ansible.builtin.command", "getent passwd sglang")
    for host, res in users.items():
        _, _, uid, _, _, _, shell = res["stdout"].split(":")
        assert int(uid) < 1000 and shell in ("/usr/sbin/nologin", "/bin/false"), (host, res["stdout"])
    for unit in ("sglang-router", "sglang-guard"):
        router = adhoc("sglang_router", "ansible.builtin.command", f"systemctl show {unit} -p DynamicUser")
        assert router["lab-gateway"]["stdout"] == "DynamicUser=yes", unit


def test_no_secret_in_the_guard_metrics() -> None:
    """The guard holds the router's admin key and the server key; its metrics (open to scrapers) hold none."""
    shown = lab(
        "lab-gateway",
        'python3 -c "import urllib.request; print(urllib.request.urlopen('
        "'http://127.0.0.1:29100/metrics', timeout=10).read().decode())\"",
    ).stdout
    assert "glm5_guard_verdict" in shown, shown[:2000]
    assert leaks(shown) == []


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_unit_exposure_is_at_most_4(unit: str, adhoc, capsys) -> None:
    hosts = UNITS[unit]
    scored = adhoc(":".join(hosts), "ansible.builtin.command", f"systemd-analyze security --no-pager {unit}")
    for host in hosts:
        match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", scored[host]["stdout"])
        assert match, scored[host]["stdout"][-500:]
        with capsys.disabled():
            print(f"\nexposure {unit} on {host}: {match.group(1)}")
        assert float(match.group(1)) <= MAX_EXPOSURE, scored[host]["stdout"]


def test_the_unit_has_nvidia_modprobe_make_the_devices_as_root_before_the_server_starts() -> None:
    """The lab's nvidia-modprobe stand-in refuses a caller that is not root, as the real one does under
    NoNewPrivileges, and records each call: the unit's '+' ExecStartPre ran it as root, before the server it
    started (as the sglang user, with no capability) last time."""
    for host in LAB_NODES:
        calls = lab(host, "cat /run/glm5-lab/nvidia-modprobe.log").stdout.splitlines()
        assert len(calls) >= 2, (host, calls)
        (gpu_at, gpu_args), (uvm_at, uvm_args) = (call.split(" ", 1) for call in calls[-2:])
        assert (gpu_args, uvm_args) == ("-c=255", "-u -c=0"), (host, calls[-2:])
        started = lab(host, 'date -d "$(systemctl show -p ExecMainStartTimestamp --value sglang)" +%s')
        assert int(gpu_at) <= int(uvm_at) <= int(started.stdout), (host, calls[-2:], started.stdout)
        pid = lab(host, "systemctl show -p MainPID --value sglang.service").stdout.strip()
        owner = lab(host, f"stat -c %U /proc/{pid}").stdout.split()
        assert owner[0] == "sglang", (host, owner)
        caps = lab(host, f"grep CapEff /proc/{pid}/status").stdout.split()
        assert caps == ["CapEff:", "0000000000000000"], (host, caps)


def test_the_server_listens_on_the_node_address_only_and_smg_on_loopback_behind_its_edge(adhoc) -> None:
    listening = adhoc("sglang_nodes", "ansible.builtin.command", "ss -Hltn sport = :30000")
    for host, res in listening.items():
        local = {line.split()[3] for line in res["stdout_lines"]}
        assert local and not any(a.startswith(("0.0.0.0:", "*:", "[::]:")) for a in local), (host, local)
    smg = lab("lab-gateway", "ss -Hltnp sport = :30001").stdout.splitlines()
    assert [line.split()[3] for line in smg] == ["127.0.0.1:30001"], smg
    edge = lab("lab-gateway", "ss -Hltnp sport = :30000").stdout
    assert "nginx" in edge and "smg" not in edge and "python" not in edge, edge


def test_the_units_reference_the_key_files_only(adhoc) -> None:
    """The unit files are world-readable: they name the files that hold the keys, never the keys."""
    units = adhoc("lab", "ansible.builtin.shell", "cat /etc/systemd/system/sglang*.service")
    for host, res in units.items():
        assert leaks(res["stdout"]) == [], host
        server = host in LAB_NODES
        wanted = (
            ["--config /etc/sglang/secrets.yaml"]
            if server
            else ["EnvironmentFile=/etc/sglang-router", "EnvironmentFile=/etc/sglang-guard"]
        )
        assert all(w in res["stdout"] for w in wanted), host
    secrets = adhoc("sglang_nodes", "ansible.builtin.stat", "path=/etc/sglang/secrets.yaml")
    for host, res in secrets.items():
        stat = res["stat"]
        assert (stat["mode"], stat["pw_name"], stat["gr_name"]) == ("0640", "root", "sglang"), host


# What each key opens (docs/security.md), asked from lab-gateway (the router's host). A node's admin
# endpoints: /flush_cache (harmless: it empties the prefix cache) and /update_weights_from_disk (asked with a
# path that does not exist, so even an accepted call would change nothing; only refusals are expected here).
# sglang answers a flush with 400 while a request runs (the guard probes the node every few seconds), so the
# flush asks it to wait for the node to be idle: `?timeout=` (sglang's SchedulerFlushWrapper defers the flush
# until the scheduler is idle, up to that many seconds).
NODE = "http://gpu-node-1:30000"
FLUSH_WAIT = 60
ROUTER = ROUTER_URL
NO_WEIGHTS = {"model_path": "/nonexistent/glm5-no-weights"}
ASK = {"model": "/var/lib/sglang/models/glm5-lab-tiny", "messages": [{"role": "user", "content": "2+2?"}],
       "max_tokens": 1}  # fmt: skip
CLIENT, API, NODE_ADMIN, ROUTER_ADMIN = (
    "sglang_router_api_key",
    "sglang_server_api_key",
    "sglang_server_admin_api_key",
    "sglang_router_admin_key",
)
DOORS = [
    # (what, url, method, body, key -> expected status)
    ("node /v1", f"{NODE}/v1/models", "GET", None,
     {"": 401, CLIENT: 401, API: 200, NODE_ADMIN: 401, ROUTER_ADMIN: 401}),
    ("node cache flush", f"{NODE}/flush_cache?timeout={FLUSH_WAIT}", "POST", None,
     {"": 401, CLIENT: 401, API: 401, NODE_ADMIN: 200}),
    ("node weight update", f"{NODE}/update_weights_from_disk", "POST", NO_WEIGHTS, {CLIENT: 401, API: 401}),
    ("router /v1", f"{ROUTER}/v1/chat/completions", "POST", ASK,
     {"": 401, CLIENT: 200, API: 401, NODE_ADMIN: 401, ROUTER_ADMIN: 401}),
    ("router admin API", f"{ROUTER}/workers", "GET", None,
     {"": 401, CLIENT: 401, API: 401, ROUTER_ADMIN: 200}),
    ("router cache flush", f"{ROUTER}/flush_cache", "POST", None, {CLIENT: 401, API: 401, NODE_ADMIN: 401}),
]  # fmt: skip


@pytest.mark.parametrize(("what", "url", "method", "body", "expected"), DOORS, ids=[d[0] for d in DOORS])
def test_each_key_opens_one_door(what: str, url: str, method: str, body, expected: dict[str, int]) -> None:
    # The client waits longer than the flush may (FLUSH_WAIT): a busy node answers the flush when it is idle.
    wait = FLUSH_WAIT + 10

    def door(key: str) -> tuple[int, str]:
        # No HTTP status at all (0: the connection was refused, reset or timed out) says nothing of the key:
        # asked once more. Once, in a CI rehearsal, a node's /v1 gave one such 0 between four 401s.
        answer = http_from("lab-gateway", url, key, method, body, timeout=wait)
        return answer if answer[0] else http_from("lab-gateway", url, key, method, body, timeout=wait)

    answers = {key: door(key) for key in expected}
    got = {key: status for key, (status, _) in answers.items()}
    assert got == expected, (what, {key: text[:300] for key, (status, text) in answers.items() if not status})


def test_the_router_serves_no_server_info_and_the_nodes_show_their_keys_to_their_key_alone() -> None:
    """docs/security.md, "What the nodes' key reads": sglang 0.5.23 answers /server_info with its keys
    (resolved arguments and launch command) to a holder of the nodes' key, and smg would proxy
    /get_server_info to a worker. The edge serves neither, whatever the key; on a node, the clients' key reads
    nothing. When sglang stops showing its keys, this fails and the page changes with it."""
    for path in ("/get_server_info", "/server_info"):
        for key in (CLIENT, API, ROUTER_ADMIN):
            status, text = http_from("lab-gateway", f"{ROUTER}{path}", key)
            assert status == 404 and leaks(text) == [], (path, key, status)
    status, text = http_from("lab-gateway", f"{NODE}/server_info", API)
    assert status == 200 and SECRETS[NODE_ADMIN] in text
    assert http_from("lab-gateway", f"{NODE}/server_info", CLIENT)[0] == 401
    page = (ROOT / "docs" / "security.md").read_text()
    assert "/get_server_info" in page and "sglang 0.5.23" in page


ROTATED_KEY = "glm5-lab-rotated-client-key-not-a-secret"


def test_the_clients_key_rotates_without_a_window(run_playbook) -> None:
    """docs/security.md, "Rotating a key", there and back in two playbooks/router.yml runs (glm5_site: the
    routing check is validate.yml's, not this test's): a new clients' key with the lab's in
    sglang_router_previous_api_keys serves both; then the lab's key alone (the inventory, which puts the lab
    back) serves it and refuses the other, as the last step of any rotation refuses the key it drops. The
    edge reloads each time (its master and smg keep their PIDs), so no request is cut."""
    old = SECRETS[CLIENT]

    def served(key: str) -> int:
        return http_from("lab-gateway", f"{ROUTER}/v1/models", "", "GET", None, key_value=key)[0]

    pids = "systemctl show -p MainPID --value sglang-edge sglang-router"
    before = lab("lab-gateway", pids).stdout.split()
    try:
        both = run_playbook(
            "playbooks/router.yml",
            extravars={"glm5_site": True, "sglang_router_api_key": ROTATED_KEY,
                       "sglang_router_previous_api_keys": [old]},
        )  # fmt: skip
        assert both.status == "successful", both.stats
        assert (served(ROTATED_KEY), served(old)) == (200, 200)
    finally:
        back = run_playbook("playbooks/router.yml", extravars={"glm5_site": True})
    assert back.status == "successful", back.stats
    assert (served(old), served(ROTATED_KEY)) == (200, 401)
    assert lab("lab-gateway", pids).stdout.split() == before, "the edge or smg restarted"


def test_the_router_speaks_tls_only_and_a_client_that_does_not_trust_the_ca_is_refused() -> None:
    """The router's port with the lab CA: served. Without it (the system's CAs only): the handshake fails on
    the certificate. Plain HTTP on the same port: no answer."""
    trusted = http_from("lab-gateway", f"{ROUTER}/v1/chat/completions", CLIENT, "POST", ASK)
    untrusted = http_from("lab-gateway", f"{ROUTER}/v1/chat/completions", CLIENT, "POST", ASK, ca="")
    plain = http_from(
        "lab-gateway", ROUTER.replace("https:", "http:") + "/v1/chat/completions", CLIENT, "POST", ASK
    )
    assert trusted[0] == 200, trusted
    assert untrusted[0] == 0 and "CERTIFICATE_VERIFY_FAILED" in untrusted[1], untrusted
    assert plain[0] == 0, plain


# GET each path as written: http.client sends the request target it is given (it refuses only control
# characters and spaces), so no client normalizes /../ or an escape on the way. The key comes on stdin.
RAW_GET = """
import http.client, json, ssl, sys
scheme, host, port, ca, paths = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
key = sys.stdin.readline().rstrip(chr(10))
for path in paths:
    if scheme == "https":
        context = ssl.create_default_context(cafile=ca or None)
        conn = http.client.HTTPSConnection(host, port, timeout=10, context=context)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.putrequest("GET", path, skip_accept_encoding=True)
    conn.putheader("Authorization", "Bearer " + key)
    conn.endheaders()
    answer = conn.getresponse()
    print(json.dumps([answer.status, answer.read().decode(errors="replace")[:300]]))
    conn.close()
"""


def raw_get(paths: list[str], key: str) -> list[tuple[int, str]]:
    """Each path GET from lab-gateway to the router's edge exactly as written, with the lab key named ``key``
    (a SECRETS name, on stdin): its status and the start of its body."""
    edge = urlsplit(ROUTER)
    done = subprocess.run(
        ["podman", "exec", "-i", "glm5-lab-lab-gateway", "python3", "-c", RAW_GET,
         edge.scheme, edge.hostname or "", str(edge.port), ROUTER_CA, *paths],
        input=SECRETS[key] + "\n", capture_output=True, text=True, check=True,
    )  # fmt: skip
    answers = [tuple(json.loads(line)) for line in done.stdout.splitlines()]
    assert len(answers) == len(paths), done.stdout + done.stderr
    return answers


RAW_REFUSED = ["/v1/../workers", "/v1/%2e%2e/workers", "/v1%2fworkers"]


def test_the_edge_refuses_raw_dot_segments_and_encoded_slashes() -> None:
    """docs/security.md, "No raw paths": nginx would resolve these (the first two to /workers, the admin
    API, whose location checks no clients' key) while smg got them raw. Sent unnormalized, each gets the
    edge's own 400 with the clients' key and with the router's admin key alike; /workers itself still answers
    the admin key, and /v1/models, a query with dots too, the clients' key."""
    for key in (CLIENT, ROUTER_ADMIN):
        for path, (status, body) in zip(RAW_REFUSED, raw_get(RAW_REFUSED, key), strict=True):
            refused = (status, "dot-segment or an encoded slash" in body)
            assert refused == (400, True), (key, path, status, body)
            assert leaks(body) == [], (key, path)
    assert [status for status, _ in raw_get(["/workers"], ROUTER_ADMIN)] == [200]
    served = raw_get(["/v1/models", "/v1/models?x=a.b"], CLIENT)
    assert [status for status, _ in served] == [200, 200], served


def test_the_host_firewall_drops_another_node_and_serves_the_router() -> None:
    """gpu-node-1's server port from gpu-node-2 (not its peer, not the router): dropped, so the request times
    out; the same request from lab-gateway (the router and the guard) is served. The rendezvous port is
    dropped even for lab-gateway (only a replica's peers may reach it)."""
    dropped = http_from("gpu-node-2", f"{NODE}/health", timeout=3)
    served = http_from("lab-gateway", f"{NODE}/health")
    rendezvous = http_from("lab-gateway", "http://gpu-node-1:20000/", timeout=3)
    assert dropped[0] == 0 and "timed out" in dropped[1], dropped
    assert served[0] == 200, served
    assert rendezvous[0] == 0 and "timed out" in rendezvous[1], rendezvous


def test_a_deleted_firewall_table_is_loaded_again_by_the_next_run(verbose_run) -> None:
    """conftest.nan_site deleted FLUSHED_NODE's table before the run (an operator's `nft flush ruleset`)."""
    run, _ = verbose_run
    loaded = run.results(FIREWALL_LOAD_TASK)
    assert set(loaded) == {FLUSHED_NODE} and loaded[FLUSHED_NODE]["changed"], sorted(loaded)
    for host in LAB_NODES:
        table = lab(host, "nft list table inet glm5_deploy", check=False)
        assert table.returncode == 0 and "counter" in table.stdout, (host, table.stderr)


def test_the_security_page_warns_that_health_and_metrics_are_open() -> None:
    page = (ROOT / "docs" / "security.md").read_text()
    assert "unauthenticated" in page.lower() and "firewall" in page.lower()


def test_secret_values_are_not_in_the_repository_outside_the_lab_inventory() -> None:
    """The lab's keys live in one place; anything else that names them would be a copy to keep in step."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    holders = []
    for name in filter(None, tracked.decode().split("\0")):
        path = ROOT / name
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        if leaks(text):
            holders.append(name)
    allowed = {"inventory/lab/group_vars/lab.yml", "inventory/lab/group_vars/sglang_router.yml"}
    assert set(holders) <= allowed, holders
