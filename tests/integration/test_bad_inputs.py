"""Bad inputs against the lab: site.yml must refuse each one before any host changes, naming the variable.

Every case runs the real site.yml at -vvv through ansible-runner with the lab's inventory, a few cases at a
time (they change nothing, so they cannot disturb one another). A case passes when the run fails, no task
reported a change, no task ran outside the checking plays, a failure message names the variable (or group) to
fix, and no secret is in the output (neither the lab's nor one the case gives).

Most cases are refused by the inputs play, which runs on the controller and connects to no host: those must
run no task outside that play, need no lab host, and run in make test's checks half (marker `controller`).
Those that are extra vars alone share a run, up to six that set different variables and name different
words (controller_refusals): the play reports every problem of a task at once, so each case's words can only
come from its own input; a case its batch's run does not show runs again alone.
The cases the nodes refuse (preflight asks the hub, reads the node's OS and GPUs, resolves the launch from
the data on the node: `on_nodes`) run against the converged lab, with the integration tests.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from conftest import LAB_NODES, ROOT, SECRETS, Run, leaks, run_playbook_in

GROUPS_PLAY = "Check the inventory's groups before anything else"
INPUTS_PLAY = "Check the inventory's inputs before anything changes"
CONTROLLER_PLAYS = {GROUPS_PLAY, INPUTS_PLAY}
CHECKING_PLAYS = {*CONTROLLER_PLAYS, "Preflight checks on the GPU nodes, before anything changes"}
ONE_NODE = "gpu-node-1:lab-gateway"
BAD_REVISION = "0123456789abcdef0123456789abcdef01234567"
PROBE = {"name": "four", "prompt": "What is 2+2? Answer briefly.", "max_tokens": 256}


@dataclass(frozen=True)
class Case:
    """One bad input: extra vars or an inventory of its own, and the words its refusal must contain."""

    name: str
    names: tuple[str, ...]
    extravars: dict[str, Any] = field(default_factory=dict)
    hosts: dict[str, Any] | None = None  # an inventory (hosts.yml) that replaces the lab's groups
    limit: str = ONE_NODE
    hidden: tuple[str, ...] = ()  # values the case gives that must appear nowhere in the output
    on_nodes: bool = False  # refused in preflight, on the nodes (needs the lab), not by the inputs play


def lab_hosts(**groups: Any) -> dict[str, Any]:
    """The lab's hosts.yml with ``groups`` (name -> hosts mapping or None) laid over its groups."""
    doc = yaml.safe_load((ROOT / "inventory" / "lab" / "hosts.yml").read_text())
    children = doc["all"]["children"]
    for name, hosts in groups.items():
        children[name] = {"hosts": hosts}
        children["lab"]["children"].setdefault(name, None)
    return doc


NODES = {h: {"ansible_host": f"glm5-lab-{h}"} for h in LAB_NODES}

CASES = [
    # Types and choices, from the roles' argument specs.
    Case("port-not-an-int", ("sglang_server_port",), {"sglang_server_port": "thirty"}),
    Case("bool-not-a-bool", ("sglang_server_start",), {"sglang_server_start": "maybe"}),
    Case(
        "long-context-too-short",
        ("sglang_validate_long_context_words",),
        {"sglang_validate_long_context_words": 10},
    ),
    Case("settings-not-a-mapping", ("sglang_settings",), {"sglang_settings": "tp_size=8"}, on_nodes=True),
    Case("environment-not-a-mapping", ("sglang_server_environment",), {"sglang_server_environment": ["A=1"]}),
    Case(
        "disk-floor-not-a-number", ("preflight_min_free_disk_gib",), {"preflight_min_free_disk_gib": "lots"}
    ),
    Case("workers-not-an-int", ("model_checkpoint_max_workers",), {"model_checkpoint_max_workers": [8]}),
    Case("unknown-arch", ("sglang_profile",), {"sglang_profile": "sm75"}),
    Case("missing-lane", ("sglang_lane",), {"sglang_lane": "nightly"}),
    Case("unknown-router-policy", ("sglang_router_policy",), {"sglang_router_policy": "fastest"}),
    Case(
        "secret-not-a-string",
        ("sglang_server_api_key", "must be a string"),
        {"sglang_server_api_key": {"k": 1}},
    ),
    # Rules across variables.
    Case("port-out-of-range", ("sglang_server_port", "1-65535"), {"sglang_server_port": 70000}),
    Case(
        "ports-collide", ("sglang_server_dist_port", "sglang_server_port"), {"sglang_server_dist_port": 30000}
    ),
    Case("router-ports-collide", ("sglang_router_metrics_port",), {"sglang_router_metrics_port": 30000}),
    Case(
        "open-bind-without-key",
        ("sglang_server_host", "sglang_server_api_key"),
        {"sglang_server_host": "0.0.0.0", "sglang_server_api_key": ""},
    ),
    Case(
        "open-bind-without-admin-key",
        ("sglang_server_host", "sglang_server_admin_api_key"),
        {"sglang_server_admin_api_key": ""},
    ),
    Case(
        "open-router-without-key",
        ("sglang_router_host", "sglang_router_api_key"),
        {"sglang_router_api_key": ""},
    ),
    # Each key opens one door: the API key must not open the nodes' admin endpoints (named both, the value
    # never shown).
    Case(
        "two-doors-one-key",
        ("sglang_server_admin_api_key", "sglang_server_api_key", "one door"),
        {
            "sglang_server_admin_api_key": "glm5-shared-key-not-a-secret",
            "sglang_server_api_key": "glm5-shared-key-not-a-secret",
        },
        hidden=("glm5-shared-key-not-a-secret",),
    ),
    # The clients' key is a door of its own: the nodes' key as the clients' key would let every client reach
    # the nodes (and read their keys from /server_info).
    Case(
        "clients-key-is-the-nodes-key",
        ("sglang_router_api_key", "sglang_server_api_key", "one door"),
        {"sglang_router_api_key": SECRETS["sglang_server_api_key"]},
        hidden=(SECRETS["sglang_server_api_key"],),
    ),
    # The edge writes the clients' key into nginx's configuration as a header string.
    Case(
        "clients-key-not-a-token",
        ("sglang_router_api_key", "letters, digits"),
        {"sglang_router_api_key": 'glm5-"quoted"-not-a-secret'},
        hidden=('glm5-"quoted"-not-a-secret',),
    ),
    Case("repo-not-org-name", ("model_checkpoint_repo",), {"model_checkpoint_repo": "GLM-5-NVFP4"}),
    Case("empty-revision", ("model_checkpoint_revision",), {"model_checkpoint_revision": ""}),
    # The hub is asked from the node: a repository or a revision it does not have. The missing repository is
    # pinned with a revision, as an inventory would: the lab's default revision is the mirror's own for the
    # repository, which an unknown repository does not have (the inputs play failed on that instead).
    Case(
        "missing-model-repo",
        ("model_checkpoint_repo",),
        {"model_checkpoint_repo": "glm5-lab/no-such-model", "model_checkpoint_revision": BAD_REVISION},
        on_nodes=True,
    ),
    Case(
        "missing-revision",
        ("model_checkpoint_revision",),
        {"model_checkpoint_revision": BAD_REVISION},
        on_nodes=True,
    ),
    # The launch, resolved from the data on the node.
    Case("tp-larger-than-gpus", ("preflight_tp_size", "8 GPU(s)"), {"preflight_tp_size": 16}, on_nodes=True),
    Case(
        "tp-does-not-divide",
        ("preflight_tp_size", "does not divide"),
        {"preflight_tp_size": 3},
        on_nodes=True,
    ),
    Case(
        "unknown-backend",
        ("sglang_settings.attention_backend", "choices"),
        {"sglang_settings": {"attention_backend": "warp_drive"}},
        on_nodes=True,
    ),
    Case("unknown-flag", ("sglang_settings.tp_sise",), {"sglang_settings": {"tp_sise": 8}}, on_nodes=True),
    Case(
        "malformed-json-setting",
        ("sglang_settings.json_model_override_args", "not valid JSON"),
        {"sglang_settings": {"json_model_override_args": '{"rope_scaling": '}},
        on_nodes=True,
    ),
    Case(
        "known-bad-combination",
        ("sm120-dsa-decode-flashmla-nan", "sglang_allow_known_bad"),
        {
            "sglang_profile": "sm120",
            "sglang_lane": "seed",
            "sglang_settings": {"dsa_prefill_backend": "flashmla_auto", "dsa_decode_backend": "flashmla_kv"},
        },
        on_nodes=True,
    ),
    # TLS from the router to the nodes needs sglang's --ssl-* flags, which the seed lane (0.5.9) lacks.
    Case(
        "node-tls-on-the-seed-lane",
        ("sglang_server_tls_certificate", "no ssl_certfile, ssl_keyfile, ssl_ca_certs flag", "0.5.23 lane"),
        {
            "sglang_profile": "sm120",
            "sglang_lane": "seed",
            "sglang_server_tls_certificate": "{{ lookup('ansible.builtin.file', lab_tls_dir ~ '/ca.pem') }}",
        },
        on_nodes=True,
    ),
    Case(
        "unsupported-os",
        ("preflight_supported_os", "debian12"),
        {"preflight_supported_os": ["ubuntu2404"]},
        on_nodes=True,
    ),
    # Inputs mean what they say. sglang_settings: keys the roles own (aliases included), values that would be
    # flags of their own on the command line, sglang's ranges, tp_size against preflight's GPU count.
    Case(
        "settings-item-smuggles-a-flag",
        ("sglang_settings.cuda_graph_bs_decode[1]", "begins with a dash"),
        {"sglang_settings": {"cuda_graph_bs_decode": [1, "--host", "0.0.0.0"]}},
    ),
    Case(
        "settings-value-smuggles-a-flag",
        ("sglang_settings.tool_call_parser", "begins with a dash"),
        {"sglang_settings": {"tool_call_parser": "--api-key=smuggled"}},
    ),
    Case(
        "settings-owned-host",
        ("sglang_settings.host", "the role owns this", "sglang_server_host"),
        {"sglang_settings": {"host": "0.0.0.0"}},
    ),
    Case(
        "settings-owned-model-alias",
        ("sglang_settings.model", "model_path", "sglang_server_model_path"),
        {"sglang_settings": {"model": "/var/lib/sglang/models/other"}},
    ),
    Case(
        "settings-owned-api-key",
        ("sglang_settings.api_key", "sglang_server_api_key"),
        {"sglang_settings": {"api_key": "smuggled-key-not-a-secret"}},
        hidden=("smuggled-key-not-a-secret",),
    ),
    Case(
        "settings-owned-served-name",
        ("sglang_settings.served_model_name", "sglang_server_served_model_name"),
        {"sglang_settings": {"served_model_name": "glm-5"}},
    ),
    Case(
        "settings-owned-replica-place",
        ("sglang_settings.nnodes", "sglang_settings.node_rank", "sglang_replica_"),
        {"sglang_settings": {"nnodes": 2, "node_rank": 0}},
    ),
    Case(
        "settings-owned-dist-init-addr",
        ("sglang_settings.dist_init_addr", "sglang_server_dist_port"),
        {"sglang_settings": {"dist_init_addr": "gpu-node-1:20000"}},
    ),
    Case(
        "fraction-above-one",
        ("sglang_settings.mem_fraction_static", "fraction in (0, 1]"),
        {"sglang_settings": {"mem_fraction_static": 1.5}},
    ),
    Case(
        "count-not-positive",
        ("sglang_settings.max_running_requests", "must be positive"),
        {"sglang_settings": {"max_running_requests": 0}},
    ),
    Case(
        "tp-above-preflight-gpus",
        ("sglang_settings.tp_size", "preflight_tp_size"),
        {"sglang_settings": {"tp_size": 16}},
    ),
    # Ports below 1024: no unit but the edge's grants CAP_NET_BIND_SERVICE (an edge on 443 is allowed).
    Case(
        "server-port-privileged", ("sglang_server_port", "CAP_NET_BIND_SERVICE"), {"sglang_server_port": 80}
    ),
    Case(
        "router-upstream-port-privileged",
        ("sglang_router_upstream_port", "CAP_NET_BIND_SERVICE"),
        {"sglang_router_upstream_port": 443},
    ),
    # Secrets: printable ASCII without whitespace, never shown.
    Case(
        "secret-with-whitespace",
        ("sglang_server_api_key", "printable ASCII"),
        {"sglang_server_api_key": "two words-not-a-secret"},
        hidden=("two words-not-a-secret",),
    ),
    Case(
        "token-not-ascii",
        ("model_checkpoint_hf_token", "printable ASCII"),
        {"model_checkpoint_hf_token": "hf_t\u00f6kenZ9NotASecret"},
        hidden=("kenZ9NotASecret",),
    ),
    Case(
        "admin-key-with-colon",
        ("sglang_router_admin_key", "colon"),
        {"sglang_router_admin_key": "glm5:lab:admin:colon-key-not-a-secret"},
        hidden=("colon-key-not-a-secret",),
    ),
    # URLs: http(s), no credentials (never shown).
    Case(
        "endpoint-with-credentials",
        ("model_checkpoint_hf_endpoint", "user:password"),
        {"model_checkpoint_hf_endpoint": "http://mirror:pw-not-a-secret@lab-gateway:8090"},
        hidden=("pw-not-a-secret",),
    ),
    Case(
        "wheelhouse-with-credentials",
        ("sglang_runtime_wheelhouse", "user:password"),
        {"sglang_runtime_wheelhouse": "http://ops:pw-not-a-secret@lab-gateway:8080/wheels/"},
        hidden=("pw-not-a-secret",),
    ),
    Case(
        "endpoint-not-http",
        ("model_checkpoint_hf_endpoint", "http(s) URL"),
        {"model_checkpoint_hf_endpoint": "ftp://lab-gateway:8090"},
    ),
    # One-line values, hosts that are hosts.
    Case(
        "revision-with-line-break",
        ("model_checkpoint_revision", "line break"),
        {"model_checkpoint_revision": BAD_REVISION + "\n"},
    ),
    Case(
        "name-injects-a-unit-line",
        ("sglang_server_served_model_name", "line break"),
        {"sglang_server_served_model_name": "glm-5\nExecStartPre=/bin/true"},
    ),
    Case(
        "advertise-host-with-port",
        ("sglang_server_advertise_host", "host:port", "sglang_server_port"),
        {"sglang_server_advertise_host": "gpu-node-1:30000"},
    ),
    Case(
        "router-host-is-a-url",
        ("sglang_router_host", "not host:port or a URL"),
        {"sglang_router_host": "http://0.0.0.0"},
    ),
    # Probes: regexes compile, max_tokens sane, names unique, prompts given.
    Case(
        "probe-regex-does-not-compile",
        ("sglang_validate_probes[0].expect", "regular expression"),
        {"sglang_validate_probes": [PROBE | {"expect": "([0-9]"}]},
    ),
    Case(
        "probe-max-tokens-too-large",
        ("sglang_validate_probes[0].max_tokens", "32768"),
        {"sglang_validate_probes": [PROBE | {"max_tokens": 1000000}]},
    ),
    Case(
        "probe-names-repeat",
        ("sglang_validate_probes[1].name", "used twice"),
        {"sglang_validate_probes": [PROBE, PROBE]},
    ),
    Case(
        "probe-prompt-empty",
        ("sglang_validate_probes[0].prompt", "empty"),
        {"sglang_validate_probes": [PROBE | {"prompt": "  "}]},
    ),
    Case(
        "probe-only-blank-answers-match",
        ("sglang_validate_probes[0].expect", "only blank text matches"),
        {"sglang_validate_probes": [PROBE | {"expect": "^\\s*$"}]},
    ),
    Case(
        "probe-every-answer-matches",
        ("sglang_validate_probes[0].expect", "every answer matches"),
        {"sglang_validate_probes": [PROBE | {"expect": ""}]},
    ),
    # Settings past the checkpoint's own configuration (GLM-5's config.json).
    Case(
        "context-past-the-model",
        ("sglang_settings.context_length", "202752"),
        {
            "model_checkpoint_repo": "nvidia/GLM-5-NVFP4",
            "model_checkpoint_revision": BAD_REVISION,
            "sglang_settings": {"context_length": 262144},
        },
    ),
    # Timeouts and retries, environments.
    Case(
        "health-timeout-zero",
        ("sglang_server_health_timeout", "positive"),
        {"sglang_server_health_timeout": 0},
    ),
    Case("retries-negative", ("sglang_validate_retries", "0 or more"), {"sglang_validate_retries": -1}),
    Case(
        "environment-line-break",
        ("sglang_server_environment.OMP_NUM_THREADS", "line break"),
        {"sglang_server_environment": {"OMP_NUM_THREADS": "1\nLD_PRELOAD=/tmp/x.so"}},
    ),
    Case(
        "environment-owned",
        ("sglang_environment.SGLANG_LOGGING_CONFIG_PATH", "the role owns this"),
        {"sglang_environment": {"SGLANG_LOGGING_CONFIG_PATH": "/dev/null"}},
    ),
    # The inventory's shape (the contract, playbooks/groups.yml: the inputs play's first play).
    Case(
        "empty-node-group", ("sglang_nodes",), hosts=lab_hosts(sglang_nodes=None, lab_spare=NODES), limit=""
    ),
    # Issue 41: groups of other names ran every play on "no hosts matched" and ended green.
    Case(
        "groups-of-other-names",
        ("sglang_nodes and sglang_router are missing or empty", "gpu_nodes (2 hosts)", "routers (1 host)"),
        hosts=lab_hosts(
            sglang_nodes=None,
            sglang_router=None,
            gpu_nodes=NODES,
            routers={"lab-gateway": {"ansible_host": "glm5-lab-lab-gateway"}},
        ),
        limit="",
    ),
    Case(
        "groups-of-other-names-limited",
        ("group sglang_nodes is missing or empty", "gpu_nodes (2 hosts)"),
        hosts=lab_hosts(sglang_nodes=None, gpu_nodes=NODES),
        limit="gpu-node-1",
    ),
    Case(
        "two-router-hosts",
        ("sglang_router has 2 hosts", "Keep one host in sglang_router"),
        hosts=lab_hosts(
            sglang_router={"lab-gateway": {"ansible_host": "glm5-lab-lab-gateway"}, "gpu-node-1": None}
        ),
        limit="",
    ),
    Case(
        "group-name-in-capitals",
        ("SGLANG_REPLICA_PAIR is not sglang_replica_pair",),
        hosts=lab_hosts(SGLANG_REPLICA_PAIR={"gpu-node-1": None, "gpu-node-2": None}),
        limit="",
    ),
    Case(
        "two-names-one-machine",
        ("gpu-node-1 and gpu-node-3 reach one machine",),
        hosts=lab_hosts(sglang_nodes={**NODES, "gpu-node-3": {"ansible_host": "glm5-lab-gpu-node-1"}}),
        limit="",
    ),
    Case(
        "node-advertised-on-loopback",
        ("gpu-node-2's address is '127.0.0.1'", "sglang_server_advertise_host of gpu-node-2"),
        {"sglang_server_advertise_host": "127.0.0.1"},
    ),
    Case(
        "empty-replica-group",
        ("sglang_replica_pair",),
        hosts=lab_hosts(sglang_replica_pair=None),
        limit="",
    ),
    Case(
        "replica-member-not-a-node",
        ("sglang_replica_pair", "sglang_nodes"),
        hosts=lab_hosts(sglang_replica_pair={"gpu-node-2": None, "lab-gateway": None}),
        limit="",
    ),
    Case(
        "unreachable-rank-0",
        ("sglang_server_advertise_host", "rank0.invalid"),
        hosts=lab_hosts(
            # Ranked in the group's order, which yaml.safe_dump sorts: gpu-node-1 is rank 0.
            sglang_replica_pair={
                "gpu-node-1": {"sglang_server_advertise_host": "rank0.invalid"},
                "gpu-node-2": None,
            }
        ),
        limit="",
        on_nodes=True,
    ),
]


def failure_text(run: Run) -> str:
    """Every failure message of the run, as one string."""
    parts = []
    for event in run.events:
        if event.get("event") == "runner_on_failed":
            res = event["event_data"].get("res", {})
            parts.append(str(res.get("msg", "")))
            parts.append(str(res.get("results", "")))
    return "\n".join(parts)


CONTROLLER_CASES = [case for case in CASES if not case.on_nodes]
NODE_CASES = [case for case in CASES if case.on_nodes]


@pytest.mark.controller
def test_the_suite_has_at_least_50_cases() -> None:
    assert len(CASES) >= 50
    assert len({c.name for c in CASES}) == len(CASES)


# Cases run this many at a time. Each is refused in the checking plays, which change nothing, so they cannot
# disturb one another; they mostly wait on ssh round trips and process start-up.
WORKERS = 4


def refuse_all(cases: list[Case], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Each case's site.yml run at -vvv, WORKERS at a time, by case name."""
    places = {case.name: tmp_path_factory.mktemp(case.name) for case in cases}

    def refuse(case: Case) -> Run:
        tmp_path = places[case.name]
        inventory = None
        if case.hosts is not None:
            inventory = tmp_path / "inventory"
            inventory.mkdir()
            (inventory / "hosts.yml").write_text(yaml.safe_dump(case.hosts))
            (inventory / "group_vars").symlink_to(ROOT / "inventory" / "lab" / "group_vars")
        runs = tmp_path / "runs"
        runs.mkdir()
        return run_playbook_in(
            runs,
            "site.yml",
            extravars=case.extravars,
            cmdline=f"--limit {case.limit}" if case.limit else "",
            inventory=inventory,
            verbosity=3,
        )

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return dict(zip(places, pool.map(refuse, cases), strict=True))


# Cases the inputs play refuses, this many in one run at most (each case's extra vars together): the play
# reports every problem of a stage at once, and a run costs seconds of controller CPU whatever it refuses.
BATCH = 6


def batchable(case: Case) -> bool:
    """A case that is only extra vars over the lab's inventory, with the default limit."""
    return case.hosts is None and case.limit == ONE_NODE and bool(case.extravars)


def words(case: Case) -> set[str]:
    """The variables a case sets and the words its refusal must name."""
    return set(case.extravars) | set(case.names)


def batches(cases: list[Case], size: int = BATCH) -> list[list[Case]]:
    """Cases grouped so that no two in a group set the same variable or name a word of the other: each
    refusal's words can only come from its own input. First fit, in the suite's order."""
    groups: list[list[Case]] = []
    for case in cases:
        for group in groups:
            if len(group) < size and all(not words(case) & words(other) for other in group):
                group.append(case)
                break
        else:
            groups.append([case])
    return groups


def merged(group: list[Case]) -> Case:
    """One case with the group's inputs, hidden values and names."""
    extravars: dict[str, Any] = {}
    for case in group:
        extravars |= case.extravars
    return Case(
        "+".join(case.name for case in group),
        tuple(word for case in group for word in case.names),
        extravars,
        hidden=tuple(value for case in group for value in case.hidden),
    )


@pytest.fixture(scope="module")
def controller_refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The inputs play's cases, no lab host needed: the extra-vars cases BATCH to a run (batches()), the
    others alone. A case whose refusal its batch's run does not show (another case stopped the play at an
    earlier task: the play stops at the first task that fails, and reports all that fail there) runs again
    alone."""
    groups = batches([case for case in CONTROLLER_CASES if batchable(case)])
    alone = [case for case in CONTROLLER_CASES if not batchable(case)]
    runs = refuse_all([merged(group) for group in groups if len(group) > 1] + alone, tmp_path_factory)
    judged: dict[str, Run] = {case.name: runs[case.name] for case in alone}
    again = []
    for group in groups:
        run = runs.get(merged(group).name)
        for case in group:
            text = failure_text(run) if run else ""
            if run and run.status == "failed" and all(word in text for word in case.names):
                judged[case.name] = run
            else:
                again.append(case)
    return judged | refuse_all(again, tmp_path_factory)


@pytest.fixture(scope="module")
def node_refusals(tmp_path_factory: pytest.TempPathFactory, lab_up: None, bench_beside) -> dict[str, Run]:
    """The cases the nodes refuse, against the converged lab. test_site's benchmark runs meanwhile
    (conftest.bench_beside): neither changes the fleet."""
    return refuse_all(NODE_CASES, tmp_path_factory)


def check_refused(case: Case, run: Run, plays: set[str]) -> None:
    """The run failed before any change, ran tasks only in ``plays``, named what to fix, showed no secret."""
    assert run.status == "failed", f"{case.name}: the run was not refused"
    assert "task path:" in run.stdout, "no -vvv output"
    assert leaks(run.stdout) == [], f"{case.name}: a secret in the -vvv output"
    shown = [value for value in case.hidden if value in run.stdout]
    assert not shown, f"{case.name}: the value(s) {shown} in the -vvv output"
    ran = [e["event_data"] for e in run.events if e.get("event", "").startswith("runner_on_")]
    outside = sorted({d.get("play", "") for d in ran} - plays)
    assert not outside, f"{case.name}: tasks ran past the checks, in {outside}; stats {run.stats}"
    changed = [f"{d['host']}: {d.get('task')}" for d in ran if (d.get("res") or {}).get("changed")]
    assert not changed, f"{case.name}: changed before the refusal: {changed}"
    text = failure_text(run)
    failed = [
        (e["event_data"].get("host"), e["event_data"].get("task"), str(e["event_data"].get("res", {}))[:1500])
        for e in run.events
        if e.get("event") in ("runner_on_failed", "runner_item_on_failed")
    ]
    for word in case.names:
        assert word in text, f"{case.name}: the refusal does not name {word!r}; failed: {failed}"


@pytest.mark.controller
@pytest.mark.parametrize("case", CONTROLLER_CASES, ids=lambda c: c.name)
def test_bad_input_is_refused_on_the_controller(case: Case, controller_refusals: dict[str, Run]) -> None:
    check_refused(case, controller_refusals[case.name], CONTROLLER_PLAYS)


@pytest.mark.parametrize("case", NODE_CASES, ids=lambda c: c.name)
def test_bad_input_is_refused_before_any_change(case: Case, node_refusals: dict[str, Run]) -> None:
    run = node_refusals[case.name]
    check_refused(case, run, CHECKING_PLAYS)
    # The split holds both ways: a case the inputs play refuses belongs with the controller's cases.
    failed = {e["event_data"].get("play") for e in run.events if e.get("event") == "runner_on_failed"}
    assert not failed & CONTROLLER_PLAYS, f"{case.name}: refused by the inputs play; mark it on_nodes=False"
