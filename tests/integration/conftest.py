"""Drive playbooks against the lab through ansible-runner and expose stats and events to the tests.

These tests need the lab up (`make lab-up`; `make integration` does it first).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
# The lab's GPU nodes, as its inventory lists them (inventory/lab/hosts.yml: gpu-node-1 and gpu-node-2).
_LAB_HOSTS = yaml.safe_load((ROOT / "inventory" / "lab" / "hosts.yml").read_text())
LAB_NODES = tuple(_LAB_HOSTS["all"]["children"]["sglang_nodes"]["hosts"])

# The lab's secrets (lab values in inventory/lab/group_vars, handled by the roles exactly like vault values).
_LAB_VARS = yaml.safe_load((ROOT / "inventory" / "lab" / "group_vars" / "lab.yml").read_text())
_ROUTER_VARS = yaml.safe_load((ROOT / "inventory" / "lab" / "group_vars" / "sglang_router.yml").read_text())
_TLS_DIR = Path(
    (os.environ.get("GLM5_CACHE") or (Path.home() / ".cache" / "glm5-deploy").as_posix()) + "-lab-tls"
)
SECRETS = {
    "sglang_router_api_key": _LAB_VARS["sglang_router_api_key"],
    "sglang_server_api_key": _LAB_VARS["sglang_server_api_key"],
    "sglang_server_admin_api_key": _LAB_VARS["sglang_server_admin_api_key"],
    "model_checkpoint_hf_token": _LAB_VARS["model_checkpoint_hf_token"],
    "sglang_router_admin_key": _ROUTER_VARS["sglang_router_admin_key"],
    # One line of the router's TLS key (lab/bin/lab-tls): enough to find the key wherever it would leak.
    "sglang_router_tls_private_key": (_TLS_DIR / "router.key").read_text().splitlines()[1],
    "sglang_server_tls_private_key": (_TLS_DIR / "gpu-node-2.key").read_text().splitlines()[1],
}


def leaks(text: str) -> list[str]:
    """The names of the lab secrets that appear in ``text``."""
    return [name for name, value in SECRETS.items() if value and value in text]


# What every ansible-runner run of the suite gets in its environment. The project's callbacks are named by
# their FQCNs (glm5.deploy.*), so they load from the collection whatever ANSIBLE_CALLBACK_PLUGINS says
# (ansible-runner puts its own event callback's directory there, as AWX does).
RUNNER_ENV = {
    "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
    "ANSIBLE_NOCOLOR": "1",
    # ansible-runner's own stdout callback (awx_display, as in AWX) builds on the one named here: the
    # project's, which prints a long step's progress in place of its retry lines (docs/operations.md).
    "ANSIBLE_STDOUT_CALLBACK": "glm5.deploy.glm5_default",
}

# A user's own project with the collection installed from its artifact: an ansible.cfg of its own, an empty
# collections path but for the artifact, the lab's inventory. user_project() builds it.
USER_CFG = """[defaults]
inventory = {inventory}
collections_path = {collections}
callbacks_enabled = ansible.posix.profile_tasks, glm5.deploy.glm5_preload, glm5.deploy.glm5_template_cache,
  glm5.deploy.glm5_module_bytecode, glm5.deploy.glm5_fleet_lock
interpreter_python = auto_silent
host_key_checking = False
forks = 50
display_skipped_hosts = False

[connection]
pipelining = True

[ssh_connection]
ssh_args = -C -o ControlMaster=auto -o ControlPersist=300s -o ServerAliveInterval=15 -o ServerAliveCountMax=4
retries = 3
"""


def install_collection(project: Path) -> Path:
    """Build the collection's artifact and install it into an empty collections path (make
    collection-install, in project/build), then write a user's project configuration that finds only it;
    returns that project's ansible.cfg."""
    build = project / "build"
    make = ["make", "-s", "collection-install", f"COLLECTION_DIR={build}"]
    subprocess.run(make, cwd=ROOT, check=True, capture_output=True)
    config = project / "ansible.cfg"
    config.write_text(USER_CFG.format(inventory=ROOT / "inventory" / "lab", collections=build / "installed"))
    return config


@pytest.fixture(scope="session")
def user_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ansible.cfg of a user's project where only the installed artifact provides glm5.deploy."""
    return install_collection(tmp_path_factory.mktemp("user-project"))


def clean_clone(dest: Path) -> str:
    """A git repository at ``dest`` holding this work tree as a commit would (tracked files and new ones git
    does not ignore, links kept as links): what a clean clone of it holds. Returns its git+file URL, the form
    `ansible-galaxy collection install` and an AWX project's collections/requirements.yml take."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    files = [p for p in listed.split(b"\0") if p and os.path.lexists(ROOT / os.fsdecode(p))]
    dest.mkdir(parents=True)
    pack = subprocess.run(
        ["tar", "--null", "-T", "-", "-cf", "-"],
        cwd=ROOT,
        input=b"\0".join(files),
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-xf", "-"], cwd=dest, input=pack.stdout, check=True)
    git = ["git", "-c", "user.name=lab", "-c", "user.email=lab@localhost", "-c", "init.defaultBranch=main"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the work tree"]):
        subprocess.run([*git, *argv], cwd=dest, check=True, capture_output=True)
    return f"git+file://{dest}"


@pytest.fixture(scope="session")
def git_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ansible.cfg of a user's project whose glm5.deploy was installed from a git URL (a clean clone of
    this work tree), as `ansible-galaxy collection install git+<url>` and AWX's requirements.yml do."""
    project = tmp_path_factory.mktemp("git-project")
    url = clean_clone(project / "repository")
    installed = project / "installed"
    config = project / "ansible.cfg"
    config.write_text(USER_CFG.format(inventory=ROOT / "inventory" / "lab", collections=installed))
    galaxy = ROOT / ".venv" / "bin" / "ansible-galaxy"
    done = subprocess.run(
        [str(galaxy), "collection", "install", url, "-p", str(installed)],
        env={**os.environ, "ANSIBLE_CONFIG": str(config)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "was installed successfully" in done.stdout, done.stdout + done.stderr
    return config


@dataclass
class Run:
    """The outcome of one ansible-runner run: its status, per-host stats and every event."""

    rc: int
    status: str
    stats: dict[str, dict[str, int]]
    events: list[dict[str, Any]]
    stdout: str = ""

    def count(self, kind: str, host: str) -> int:
        """Per-host stat ('changed', 'failures', 'ok', ...) from the play recap."""
        return self.stats.get(kind, {}).get(host, 0)

    def custom_stats(self) -> dict[str, Any]:
        """What the run's set_stats tasks kept (the stats event's artifact_data, what AWX keeps of a job)."""
        stats = [e for e in self.events if e.get("event") == "playbook_on_stats"]
        return stats[-1]["event_data"].get("artifact_data", {}) if stats else {}

    def results(self, task: str, event: str = "runner_on_ok") -> dict[str, dict[str, Any]]:
        """Per-host module results of the task with this name."""
        return {
            e["event_data"]["host"]: e["event_data"]["res"]
            for e in self.events
            if e.get("event") == event and e["event_data"].get("task") == task
        }


def run_playbook_in(
    tmp_path: Path,
    playbook: str,
    extravars: dict[str, Any] | None = None,
    cmdline: str = "",
    inventory: str | Path | None = None,
    verbosity: int = 0,
    config: Path | None = None,
) -> Run:
    """Run a playbook of this repository (default: against the lab inventory) in a fresh private dir. With
    ``config`` (a user's project, user_project()), the playbook is the collection's, by its FQCN."""
    private = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    private.mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=str(config.parent if config else ROOT),
        playbook=playbook if config else str(ROOT / playbook),
        inventory=str(inventory or ROOT / "inventory" / "lab"),
        extravars=extravars or {},
        cmdline=cmdline or None,
        verbosity=verbosity or None,
        envvars={
            **RUNNER_ENV,
            **({"ANSIBLE_CONFIG": str(config)} if config else {}),
            # An inventory outside inventory/lab (a test's own) still finds the lab's scripts.
            "GLM5_LAB_DIR": str(ROOT / "lab"),
        },
        quiet=True,
    )
    stdout = (private / "artifacts").glob("*/stdout")
    run = Run(
        runner.rc,
        runner.status,
        runner.stats or {},
        list(runner.events),
        "".join(p.read_text(errors="replace") for p in stdout),
    )
    shutil.rmtree(private / "artifacts", ignore_errors=True)
    return run


@pytest.fixture(scope="session")
def lab_up(request: pytest.FixtureRequest) -> None:
    """Skip nothing: fail loudly when the lab is not up, so a broken setup is never a green run. When the
    session scans the world-readable files for secrets, the release trees are scanned now
    (scan_release_trees)."""
    out = subprocess.run(
        ["podman", "ps", "--filter", "label=io.glm5-deploy.lab", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    missing = [h for h in (*LAB_NODES, "lab-gateway") if f"glm5-lab-{h}" not in out]
    assert not missing, f"lab hosts not running: {missing}; run `make lab-up`"
    if any(item.name == WORLD_READABLE_TEST for item in request.session.items):
        RELEASE_SCAN.update(scan_release_trees())


# --------------------------------------------------------------------------------------------------------
# The release trees (the sglang venvs under RELEASES: 69,000 of a lab node's 81,000 world-readable files and
# 1.5 of its 1.8 GB) are scanned for the lab's secrets when the lab tests start, right after molecule default
# wrote them, while they are still in the page cache. test_security's scan of every world-readable file
# (WORLD_READABLE_TEST) then reads, under RELEASES, only the files created or changed since: a file whose
# ctime is older than the marker, touched before the early scan began, holds what that scan read. Read cold
# at that test, beside the checks half's scenarios writing their venvs and shards, the trees took minutes
# (docs/journal/measurements.md, issue 16, ninth part).
# --------------------------------------------------------------------------------------------------------

RELEASES = "/opt/sglang/releases"
RELEASES_SCANNED = "/root/.glm5-releases-scanned"
LEAK_PATTERNS = "/root/.glm5-leak-patterns"
WORLD_READABLE_TEST = "test_no_secret_in_world_readable_files"
# What the world-readable scan reads: regular files every local user can read, under 20 MB (big binaries are
# skipped), on the root filesystem.
WORLD_READABLE = "-xdev -type f -perm -0004 -size -20M"
# Each node's early scan: host -> the release files that hold a secret (filled by lab_up).
RELEASE_SCAN: dict[str, list[str]] = {}
_SCANNED = "glm5-lab: release trees scanned"


def grep_world_readable(top: str = "/", skip_scanned: bool = True) -> str:
    """The shell command that lists the world-readable files under ``top`` holding a line of LEAK_PATTERNS.
    With ``skip_scanned``, on a host with the early scan's marker, the release files whose ctime is older than
    the marker are skipped (the early scan read them); elsewhere nothing is."""
    skip = (
        f"if [ -e {RELEASES_SCANNED} ]; then "
        f"set -- ! \\( -path '{RELEASES}/*' ! -cnewer {RELEASES_SCANNED} \\); fi; "
        if skip_scanned
        else "set --; "
    )
    return (
        f'{skip}find {top} {WORLD_READABLE} "$@" -print0 2>/dev/null '
        f"| xargs -0 grep -lFf {LEAK_PATTERNS} 2>/dev/null || true"
    )


def scan_release_trees() -> dict[str, list[str]]:
    """Touch RELEASES_SCANNED on every lab node, then grep its release trees' world-readable files for the
    lab's secrets (on stdin into a root-only patterns file: no command line carries them), the nodes side by
    side; returns each node's hits."""
    script = (
        f"umask 077; cat > {LEAK_PATTERNS}; touch {RELEASES_SCANNED}; "
        f"if [ -d {RELEASES} ]; then {grep_world_readable(RELEASES, skip_scanned=False)}; fi; "
        f"rm -f {LEAK_PATTERNS}; echo '{_SCANNED}'"
    )
    patterns = "\n".join(SECRETS.values()) + "\n"

    def one(host: str) -> list[str]:
        argv = ["podman", "exec", "-i", f"glm5-lab-{host}", "sh", "-c", script]
        out = subprocess.run(argv, input=patterns, capture_output=True, text=True, check=True).stdout
        lines = out.splitlines()
        assert lines and lines[-1] == _SCANNED, f"{host}: the release scan did not finish: {out[-2000:]}"
        return lines[:-1]

    with ThreadPoolExecutor(len(LAB_NODES)) as pool:
        return dict(zip(LAB_NODES, pool.map(one, LAB_NODES), strict=True))


@pytest.fixture(scope="module")
def run_playbook(tmp_path_factory: pytest.TempPathFactory, lab_up: None) -> Iterator[Callable[..., Run]]:
    """Run a playbook of this repository against the lab inventory and collect its stats and events:
    ``run_playbook(playbook, extravars=None, cmdline="", inventory=None, verbosity=0)``."""
    yield functools.partial(run_playbook_in, tmp_path_factory.mktemp("runner"))


@pytest.fixture(scope="module")
def adhoc(tmp_path_factory: pytest.TempPathFactory, lab_up: None) -> Callable[..., dict[str, dict[str, Any]]]:
    """Run one ad-hoc module on lab hosts (test setup and probes); returns each host's result."""
    tmp_path = tmp_path_factory.mktemp("adhoc")

    def _adhoc(pattern: str, module: str, args: str) -> dict[str, dict[str, Any]]:
        private = tmp_path / f"adhoc-{len(list(tmp_path.iterdir()))}"
        private.mkdir()
        runner = ansible_runner.run(
            private_data_dir=str(private),
            project_dir=str(ROOT),
            host_pattern=pattern,
            module=module,
            module_args=args,
            inventory=str(ROOT / "inventory" / "lab"),
            envvars=RUNNER_ENV,
            quiet=True,
        )
        assert runner.status == "successful", runner.stats
        return {
            e["event_data"]["host"]: e["event_data"]["res"]
            for e in runner.events
            if e.get("event") == "runner_on_ok"
        }

    return _adhoc


# --------------------------------------------------------------------------------------------------------
# One site.yml run at -vvv with gpu-node-1 on the NaN-poisoned copy, shared by the serving-safety tests (the
# node fails and stays out of the router) and the security tests (no key in the output of a run that
# handles every key, failure messages included).
# --------------------------------------------------------------------------------------------------------

# gpu-node-1, not TLS_NODE: its inventory has no host_vars of its own for this run's to replace, and tune.yml
# (test_security.py) measures the TLS node while this one is broken.
NAN_NODE = "gpu-node-1"
NAN_REPO = "glm5-lab/glm5-lab-tiny-nan"
# A node whose host firewall table is deleted by hand before that run (an operator's `nft flush ruleset`): the
# run must load it again (test_security.py).
FLUSHED_NODE = "gpu-node-2"
FIREWALL_LOAD_TASK = "Load the firewall (again when its ruleset or unit changed, or its table was gone)"


def lab(host: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A shell command in a lab host's container (the harness's own reads and faults, outside Ansible)."""
    argv = ["podman", "exec", f"glm5-lab-{host}", "sh", "-c", command]
    return subprocess.run(argv, capture_output=True, text=True, check=check)


# The router speaks TLS (inventory/lab/group_vars/sglang_router.yml); its certificate holds 127.0.0.1, and the
# lab CA is where the router role writes it on lab-gateway.
ROUTER_URL = "https://127.0.0.1:30000"
ROUTER_CA = "/etc/glm5-deploy/router-ca.pem"
# TLS from the router to the nodes on one lab node (inventory/lab/host_vars/gpu-node-2.yml): its server speaks
# https, verified against the lab CA where the roles write the nodes' CA (on the nodes and lab-gateway).
TLS_NODE = "gpu-node-2"
NODES_CA = "/etc/glm5-deploy/nodes-ca.pem"


def node_url(host: str) -> str:
    """A lab node's server as the router (and its worker list) names it: https on TLS_NODE, else http."""
    return f"{'https' if host == TLS_NODE else 'http'}://{host}:30000"


HTTP_FROM = """
import http.client, json, ssl, sys, urllib.error, urllib.request
url, method, timeout, ca = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
key, body = sys.stdin.read().split(chr(10), 1)
headers = {"Content-Type": "application/json"} | ({"Authorization": "Bearer " + key} if key else {})
request = urllib.request.Request(url, data=body.encode() or None, headers=headers, method=method)
context = ssl.create_default_context(cafile=ca or None) if url.startswith("https:") else None
try:
    answer = urllib.request.urlopen(request, timeout=timeout, context=context)
    print(answer.status); print(answer.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
except (OSError, http.client.HTTPException) as e:  # refused, timed out, untrusted, not HTTP at all
    print(0); print(repr(e))
"""


def http_from(
    host: str,
    url: str,
    key: str = "",
    method: str = "GET",
    body: Any = None,
    timeout: float = 10,
    ca: str = ROUTER_CA,
    key_value: str = "",
) -> tuple[int, str]:
    """One HTTP request from inside a lab host's container, with the lab key named ``key`` (a SECRETS name),
    or the key ``key_value`` (on stdin, on no command line): the status (0 when the connection fails, times
    out or the server's certificate is not trusted) and the body. An https URL is verified against ``ca``
    ("": the system's CAs)."""
    shown = subprocess.run(
        [
            "podman",
            "exec",
            "-i",
            f"glm5-lab-{host}",
            "python3",
            "-c",
            HTTP_FROM,
            url,
            method,
            str(timeout),
            ca,
        ],
        input=(SECRETS[key] if key else key_value) + "\n" + (json.dumps(body) if body is not None else ""),
        capture_output=True,
        text=True,
        check=True,
    )
    status, _, text = shown.stdout.partition("\n")
    return int(status), text


def router_admin(path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """GET (or POST ``body`` to) the router's admin API on lab-gateway with the lab's admin key (on stdin)."""
    status, text = http_from(
        "lab-gateway", ROUTER_URL + path, "sglang_router_admin_key", "POST" if body else "GET", body
    )
    assert 200 <= status < 300, (path, status, text[:300])
    return json.loads(text or "{}")


def router_workers() -> dict[str, dict[str, Any]]:
    """The router's workers by URL."""
    return {w["url"].rstrip("/"): w for w in router_admin("/workers").get("workers") or []}


# A playbook run made in a thread beside other tests, and the report root it writes into.
Beside = tuple[Future[Run], Path]


def beside_fixture(name: str, playbook: str, extravars: Callable[[Path], dict]) -> Any:
    """A session fixture ``<name>_beside``: ``playbook`` at -vvv against the lab in a thread, with the extra
    vars ``extravars(report root)``, started when a test first asks for the fixture. It gives the run's future
    and the report root; the test that judges the run waits for the future. The thread ends with the
    session."""

    @pytest.fixture(scope="session", name=f"{name}_beside")
    def beside(tmp_path_factory: pytest.TempPathFactory, lab_up: None) -> Iterator[Beside]:
        reports = tmp_path_factory.mktemp(f"{name}-reports")
        with ThreadPoolExecutor(1) as pool:
            run_dir = tmp_path_factory.mktemp(f"{name}-run")
            yield (
                pool.submit(run_playbook_in, run_dir, playbook, extravars=extravars(reports), verbosity=3),
                reports,
            )

    return beside


# tune.yml at -vvv on the other node (TLS_NODE), for test_security's tune test: one candidate, the inventory's
# own settings, so nothing on that node changes (no switch, no restart: its release, unit and server PID stay,
# which the breaking tests check). It touches neither NAN_NODE nor anything the breaking tests read, and
# serve.yml (theirs) takes no fleet lock: so it runs beside them (usefixtures), instead of a minute and a half
# on its own.
TUNE_NODE = TLS_NODE
tune_beside = beside_fixture(
    "tune",
    "playbooks/tune.yml",
    lambda reports: {
        "tune_node": TUNE_NODE,
        "sglang_tune_candidates": [{"name": "inventory", "settings": {}}],
        "sglang_tune_report_root": str(reports),
    },
)

# playbooks/bench.yml at -vvv through the router, for test_site's bench test: two concurrency levels of
# sglang's serving benchmark from a node's client. It changes nothing on the fleet, takes no fleet lock, and
# waits on its requests far more than it computes; the bad inputs' site.yml runs (test_bad_inputs.py), which
# change nothing either and are refused before the lock, keep the controller's CPU busy meanwhile. So it runs
# beside them (node_refusals asks for it first).
bench_beside = beside_fixture(
    "bench",
    "playbooks/bench.yml",
    lambda reports: {"sglang_bench_report_root": str(reports), "sglang_bench_concurrency": [1, 2]},
)


@pytest.fixture(scope="session")
def nan_site(tmp_path_factory: pytest.TempPathFactory, lab_up: None) -> Iterator[tuple[Run, float]]:
    """site.yml at -vvv with NAN_NODE's checkpoint set to the NaN copy (its own inventory's host_vars), and
    when it started; FLUSHED_NODE's firewall table deleted by hand before it. Afterwards NAN_NODE serves the
    inventory's model again (restore_nan_node)."""
    inventory = tmp_path_factory.mktemp("nan-inventory") / "lab"
    shutil.copytree(ROOT / "inventory" / "lab", inventory, symlinks=True)
    (inventory / "host_vars").mkdir(exist_ok=True)
    (inventory / "host_vars" / f"{NAN_NODE}.yml").write_text(f"model_checkpoint_repo: {NAN_REPO}\n")
    lab(FLUSHED_NODE, "nft delete table inet glm5_deploy", check=False)  # absent already after an aborted run
    started = time.time()
    run = run_playbook_in(tmp_path_factory.mktemp("nan-site"), "site.yml", inventory=inventory, verbosity=3)
    yield run, started
    restore_nan_node(tmp_path_factory.mktemp("nan-restore"), always=NAN_NODE_LEFT_BROKEN["broken"])


def restore_nan_node(tmp_path: Path, always: bool = False) -> None:
    """NAN_NODE served from the inventory again, proven and in the router (serve.yml ends with validate.yml):
    when its unit names the NaN copy, or ``always`` (it may be broken otherwise: the tests marked
    breaks_nan_node run just before the one that restores it)."""
    if not always and "tiny-nan" not in lab(NAN_NODE, "cat /etc/systemd/system/sglang.service").stdout:
        return
    if always:
        # A stalled rank may ignore SIGTERM for the unit's whole stop timeout (10 min): kill it first. Then
        # stop the unit, or systemd starts the broken launch again after RestartSec while serve.yml's tasks
        # run (a start's imports for nothing: serve.yml restarts it onto the inventory's unit).
        lab(NAN_NODE, "systemctl kill -s KILL sglang; systemctl stop sglang", check=False)
    run = run_playbook_in(tmp_path, "playbooks/serve.yml", cmdline=f"--limit {NAN_NODE}")
    assert run.status == "successful", run.stats
    NAN_NODE_LEFT_BROKEN["broken"] = False
    # serve.yml alone names the release in ExecStart, as site.yml does (not the current link): a unit written
    # through the link would make the next site.yml rewrite it and restart the node.
    unit = lab(NAN_NODE, "cat /etc/systemd/system/sglang.service").stdout
    current = lab(NAN_NODE, "readlink -f /opt/sglang/current").stdout.strip()
    assert f"ExecStart={current}/venv/bin/python " in unit, unit


NAN_NODE_RESTORED_LATER = pytest.StashKey[bool]()
# Whether NAN_NODE was left broken for the test marked restores_nan_node, and not restored since: nan_site's
# teardown then restores it, so that a failure before that restore does not leave the lab broken.
NAN_NODE_LEFT_BROKEN = {"broken": False}


# Tests that leave NAN_NODE's server broken (a crash loop, a stalled start) are marked breaks_nan_node; the
# first test that serves it from the inventory again is marked restores_nan_node (the guard's, which needs it
# healthy). Run together, the breaking tests go right before the restoring one, after the NaN site.yml run
# (which wants the fleet whole): one restart puts the node back for all of them instead of one each. A test
# marked beside_nan_node_faults judges a run on the other node that the breaking tests start in the background
# (tune_beside): it goes right after them, so that the run has had their minutes.
# trylast: after -k and -m deselected, so that a session without the restoring test restores the node itself.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    breaking = [i for i in items if i.get_closest_marker("breaks_nan_node")]
    beside = [i for i in items if i.get_closest_marker("beside_nan_node_faults")]
    restoring = next((i for i in items if i.get_closest_marker("restores_nan_node")), None)
    if not breaking:
        return
    if restoring is None:
        rest = [i for i in items if i not in beside]
        at = rest.index(breaking[-1]) + 1
        items[:] = rest[:at] + beside + rest[at:]
        return
    # Tests that need NAN_NODE serving again (test_security: since issue 40 the NaN site run leaves its engine
    # stopped) go right after the restoring test.
    after = [i for i in items if i.get_closest_marker("after_nan_node_restored") and i not in beside]
    rest = [i for i in items if i not in breaking and i not in beside and i not in after]
    at = rest.index(restoring)
    items[:] = rest[:at] + breaking + beside + [restoring] + after + rest[at + 1 :]
    config.stash[NAN_NODE_RESTORED_LATER] = True


def nan_node_restored_later(config: pytest.Config) -> bool:
    """Whether a test marked restores_nan_node runs after the ones that break NAN_NODE in this session."""
    return config.stash.get(NAN_NODE_RESTORED_LATER, False)
