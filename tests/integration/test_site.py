"""site.yml against the converged lab fleet (make integration runs molecule default first, which converges it
and proves idempotence): real answers, check mode, the fleet summary, and refusals before any change."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import LAB_NODES, ROOT, Run, lab, leaks, node_url, run_playbook_in

FACT_FILE = "/etc/ansible/facts.d/glm5_gpu.fact"
GPU_COUNT_CHECK = "Check that the node has enough GPUs for the tensor-parallel size"


# The node the tarball's check run leaves out: it asks for more GPUs than it has (its own host_vars), and the
# run allows one node to fail its own checks (preflight_node_failure_budget 1), so the others go on.
LEFT_OUT = "gpu-node-1"
LEFT_OUT_VARS = {"preflight_node_failure_budget": 1}


def left_out_inventory(tmp_path: Path) -> Path:
    """The lab's inventory with LEFT_OUT asking for 16 GPUs per node (preflight_tp_size) in its host_vars."""
    inventory = tmp_path / "lab"
    shutil.copytree(ROOT / "inventory" / "lab", inventory, symlinks=True)
    (inventory / "host_vars").mkdir(exist_ok=True)
    with (inventory / "host_vars" / f"{LEFT_OUT}.yml").open("a") as vars_file:
        vars_file.write("\npreflight_tp_size: 16\n")
    return inventory


@pytest.fixture(scope="module")
def converged(run_playbook, git_project, user_project, tmp_path_factory) -> tuple[Run, Run]:
    """The site playbook in check mode, and the runs the tests read. make integration converges the fleet
    (molecule default, site.yml from this repository) just before, so check-mode runs serve: every module
    this reads (GPU facts, the inference check, the summary) runs in check mode too. Those runs are a user's:
    the collection's glm5.deploy.site by its FQCN, as installed from a git URL (git_project, the run the tests
    read) and as installed from the tarball (user_project), side by side (check mode takes no lock and
    changes nothing). The tarball's run has LEFT_OUT fail preflight within the budget: the other node goes
    through the whole site. A fleet that is not converged is converged first."""
    inventory = left_out_inventory(tmp_path_factory.mktemp("left-out-inventory"))

    def both() -> tuple[Run, Run]:
        with ThreadPoolExecutor(2) as pool:
            runs = [
                pool.submit(
                    run_playbook_in,
                    tmp_path_factory.mktemp(name),
                    "glm5.deploy.site",
                    cmdline="--check",
                    config=cfg,
                    **more,
                )
                for name, cfg, more in (
                    ("check-from-git", git_project, {}),
                    (
                        "check-from-tarball",
                        user_project,
                        {"inventory": inventory, "extravars": LEFT_OUT_VARS},
                    ),
                )
            ]
            return runs[0].result(), runs[1].result()

    checked = both()
    if (
        checked[0].status == "successful"
        and all(sum(run.stats.get("changed", {}).values()) == 0 for run in checked)
        and set(checked[1].stats.get("failures", {})) == {LEFT_OUT}
    ):
        return checked
    run_playbook("site.yml")
    return both()


def test_site_reports_every_node(converged) -> None:
    first, _ = converged
    assert first.status == "successful", first.stats
    facts = first.results("Gather GPU facts with nvidia-smi")
    assert set(facts) == set(LAB_NODES)
    for host in LAB_NODES:
        gpu = facts[host]["ansible_facts"]["nvidia_gpu"]
        assert (gpu["arch"], gpu["count"]) == ("sm120", 8), host
        assert first.count("failures", host) == 0


PROBE_TASK = "Ask the model the probes and judge its answers"


def test_every_node_serves_the_tiny_model_and_answers_correctly(converged) -> None:
    first, _ = converged
    verdicts = first.results(PROBE_TASK)
    assert set(verdicts) == set(LAB_NODES)
    for host, verdict in verdicts.items():
        assert verdict["passed"] is True, (host, verdict.get("msg"))
        probes = {p["name"]: p for p in verdict["probes"]}
        assert probes["2+2"]["content"].strip() == "4", host
        assert probes["2+2"]["finish_reason"] == "stop", host
        assert probes["prime"]["passed"] and "def is_prime(n: int) -> bool:" in probes["prime"]["content"]
        assert verdict["journal"]["passed"] is True, host


def test_check_mode_reports_no_change_on_a_converged_fleet(converged) -> None:
    """From the collection installed from git and from the one installed from the tarball (where LEFT_OUT is
    left out, failed)."""
    assert converged[0].status == "successful"
    for checked in converged:
        assert sum(checked.stats.get("changed", {}).values()) == 0


def test_a_node_failing_preflight_is_left_out_and_the_other_goes_through_the_site(converged) -> None:
    """The tarball's run: LEFT_OUT asks for 16 GPUs and has 8. Within the budget of one node, it is named and
    left out, and the other node runs the whole site to its proof and the router; the run ends failed, and the
    summary names the node left out and why."""
    _, checked = converged
    assert checked.status == "failed", checked.stats
    assert set(checked.stats.get("failures", {})) == {LEFT_OUT}, checked.stats
    (left,) = checked.results("Leave this node out of the rest of the run", "runner_on_failed").values()
    assert left["msg"].startswith(f"{LEFT_OUT} is left out of the rest of this run: preflight: "), left["msg"]
    assert "8 GPU(s)" in left["msg"] and "preflight_tp_size" in left["msg"], left["msg"]
    budget = checked.results("Stop everything when more nodes failed their checks than the budget allows")
    assert "1 of 2 node(s) left out of this run" in next(iter(budget.values()))["msg"]
    (other,) = set(LAB_NODES) - {LEFT_OUT}
    verdicts = checked.results(PROBE_TASK)
    assert set(verdicts) == {other} and verdicts[other]["passed"] is True
    lines = next(iter(checked.results("Summarize the fleet").values()))["msg"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "LEFT OUT" in rows[LEFT_OUT] and "left out of the run: preflight: " in rows[LEFT_OUT], rows
    assert rows[other].split()[-2:] == ["passed", "in"], rows


def test_the_projects_callbacks_load_under_ansible_runner(converged) -> None:
    """ansible-runner (AWX's engine, and this suite's) sets ANSIBLE_CALLBACK_PLUGINS; the collection's
    callbacks, named by their FQCNs, load from the installed artifact all the same."""
    _, checked = converged
    assert "Skipping callback plugin" not in checked.stdout, checked.stdout[:2000]
    assert "TASKS RECAP" in checked.stdout  # profile_tasks, from the collections' own path


def test_the_run_publishes_its_results_for_awx(converged) -> None:
    """set_stats: what an AWX job keeps (its artifacts) and a workflow branches on - every replica's verdict
    and router membership, the endpoint, the model, the checkpoint's revision, the release, the evidence."""
    first, _ = converged
    fleet = first.custom_stats()["glm5_fleet"]
    assert set(fleet["replicas"]) == set(LAB_NODES), fleet
    for host, replica in fleet["replicas"].items():
        assert (replica["verdict"], replica["router"], replica["symptom"]) == ("passed", "in", ""), (
            host,
            replica,
        )
        assert replica["release"] != "-" and replica["profile"] == "cpu/current", (host, replica)
    assert fleet["endpoint"].startswith("https://") and "lab-gateway" in fleet["endpoint"], fleet
    assert fleet["model"] == "glm5-lab/glm5-lab-tiny" and len(fleet["checkpoint_revision"]) == 40, fleet
    assert (fleet["passed"], fleet["failed"], fleet["routed"]) == (len(LAB_NODES), 0, len(LAB_NODES))
    assert fleet["evidence"] != "-"


def test_the_site_ran_from_the_installed_collection(converged, git_project, user_project) -> None:
    """The check-mode runs' roles and plugins are the installed collection's, not this repository's: a user's
    project (its own ansible.cfg, an empty collections path but for the collection) runs glm5.deploy.site,
    once as installed from a git URL, once as installed from the tarball."""
    from_git = git_project.parent / "installed" / "ansible_collections" / "glm5" / "deploy"
    from_tarball = user_project.parent / "build" / "installed" / "ansible_collections" / "glm5" / "deploy"
    for checked, installed in zip(converged, (from_git, from_tarball), strict=True):
        assert (installed / "MANIFEST.json").is_file()
        task_paths = (e["event_data"].get("task_path") for e in checked.events)
        task_files = {path.split(":")[0] for path in task_paths if path}
        assert any("/roles/" in path for path in task_files)
        assert all(path.startswith(f"{installed}/") for path in task_files), sorted(task_files)[:5]
    assert not (from_git / "python_plugins").exists() and not (from_git / "lab").exists()


RENDER_TASK = "Render the launch flags for the lane's sglang version"


def test_the_units_flags_are_the_one_rendering_of_the_launch(converged) -> None:
    """Role sglang renders the launch flags once per inclusion (preflight: the profile's alone, to refuse what
    the lane lacks; serve: with the node's own). The unit's ExecStart holds exactly the serve rendering."""
    checked, _ = converged
    renders: dict[str, list[list[str]]] = {}
    for e in checked.events:
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task") == RENDER_TASK:
            renders.setdefault(e["event_data"]["host"], []).append(
                e["event_data"]["res"]["ansible_facts"]["sglang_launch_args"]
            )
    assert set(renders) == set(LAB_NODES)
    for host, (preflight, serve) in renders.items():
        unit = lab(host, "cat /etc/systemd/system/sglang.service").stdout
        (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
        argv = shlex.split(exec_start.removeprefix("ExecStart="))
        flags = argv[argv.index("sglang.launch_server") + 1 : argv.index("--config")]
        assert flags == serve, host
        assert "--model-path" in serve and "--model-path" not in preflight, host
        assert all(flag in serve for flag in preflight if flag.startswith("--")), host


def test_fleet_summary_names_every_node(converged) -> None:
    summary = converged[0].results("Summarize the fleet")
    lines = next(iter(summary.values()))["msg"]
    assert lines[0].split() == ["host", "gpus", "arch", "driver", "profile", "release", "validated", "router"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == set(LAB_NODES)
    for row in rows.values():
        assert "sm120" in row and "RTX PRO 6000" in row and "580.159.04" in row
        assert "cpu/current" in row and "0.5.23-" in row and row.split()[-2:] == ["passed", "in"]
    json.dumps(summary)  # the summary is plain data a report can store


def test_preflight_refuses_too_few_gpus_before_any_change(converged, run_playbook, adhoc) -> None:
    adhoc("gpu-node-2", "ansible.builtin.file", f"path={FACT_FILE} state=absent")

    refused = run_playbook("site.yml", extravars={"preflight_tp_size": 16})
    assert refused.status == "failed"
    failed = refused.results(GPU_COUNT_CHECK, "runner_on_failed")
    assert set(failed) == set(LAB_NODES)
    assert "preflight_tp_size" in failed["gpu-node-2"]["msg"]
    assert "8 GPU(s)" in failed["gpu-node-2"]["msg"]
    assert sum(refused.stats.get("changed", {}).values()) == 0
    # The refused run wrote nothing: the removed fact file is still absent.
    probe = adhoc("gpu-node-2", "ansible.builtin.stat", f"path={FACT_FILE}")
    assert probe["gpu-node-2"]["stat"]["exists"] is False


def test_known_bad_override_is_refused_before_any_change(converged, run_playbook) -> None:
    refused = run_playbook(
        "site.yml",
        extravars={
            "sglang_profile": "sm120",
            "sglang_lane": "seed",
            "sglang_settings": {"dsa_prefill_backend": "flashmla_auto", "dsa_decode_backend": "flashmla_kv"},
        },
    )
    assert refused.status == "failed"
    failed = refused.results("Refuse known-bad combinations", "runner_on_failed")
    assert set(failed) == set(LAB_NODES)
    message = " ".join(failed["gpu-node-1"]["msg"])
    assert "sm120-dsa-decode-flashmla-nan" in message and "sglang_allow_known_bad" in message
    assert sum(refused.stats.get("changed", {}).values()) == 0


def test_the_router_answers_and_routes_to_every_replica(converged, adhoc) -> None:
    first, _ = converged
    verdict = next(iter(first.results("Ask the probes through the router and judge the answers").values()))
    assert verdict["passed"] is True, verdict.get("msg")
    assert {p["name"]: p for p in verdict["probes"]}["2+2"]["content"].strip() == "4"
    metrics = adhoc(
        "lab-gateway", "ansible.builtin.uri", "url=http://127.0.0.1:29000/metrics return_content=true"
    )
    text = metrics["lab-gateway"]["content"]
    assert re.search(rf"^smg_worker_pool_size\{{[^}}]*\}} {len(LAB_NODES)}$", text, re.M), text[:2000]
    for host in LAB_NODES:
        assert f'smg_worker_health{{worker="{node_url(host)}"}} 1' in text


def test_bench_writes_a_report_with_plots_from_the_real_benchmark(bench_beside) -> None:
    """playbooks/bench.yml: sglang's own serving benchmark through the router, a node's client, a report. Run
    at -vvv: no key in its output (the benchmark reads its key from a root-only file, not from a command
    line's environment) nor in anything it keeps. The run is conftest.bench_beside's, made beside the bad
    inputs' refusals on the converged fleet."""
    future, tmp_path = bench_beside
    run = future.result(timeout=1200)
    assert run.status == "successful", run.stats
    assert "OPENAI_API_KEY" in run.stdout  # the -vvv output shows the command that sets it
    assert leaks(run.stdout) == []
    kept = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".png"]
    assert kept and all(leaks(p.read_text(errors="replace")) == [] for p in kept), kept
    (report_dir,) = tmp_path.iterdir()
    assert sorted(p.name for p in report_dir.glob("*.png")) == ["latency.png", "throughput.png"]
    for png in report_dir.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, png
    raw = [json.loads(p.read_text()) for p in sorted((report_dir / "raw").glob("c*.jsonl"))]
    assert [r["max_concurrency"] for r in raw] == [1, 2]
    assert all(r["completed"] == 8 and r["backend"] == "sglang" for r in raw), raw
    report = (report_dir / "report.md").read_text()
    assert "https://lab-gateway:30000" in report and "sglang: 0.5.23" in report  # the router, over TLS
    assert re.search(r"^\| 2 \| 8 \| [0-9.]+ \|", report, re.MULTILINE), report
    (kept_stats,) = run.custom_stats()["glm5_bench"].values()  # set_stats: what an AWX job keeps
    assert kept_stats["report"] == str(report_dir / "report.md") and len(kept_stats["rows"]) == 2, kept_stats
