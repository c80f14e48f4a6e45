"""glm5_preload: the project's Jinja2 plugins load once in the controller, not once per host and task."""

from __future__ import annotations

import json
import re
from pathlib import Path

from controller_play import ansible_playbook

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
{tasks}
"""
TASK = """
    - name: Use a project filter ({n})
      ansible.builtin.debug:
        msg: "{{{{ [] | glm5.deploy.glm5_proven_replicas({{}}) }}}}"
"""


def three_task_play(tmp_path: Path, task: str, logged: str) -> list[str]:
    """The lines of Ansible's debug log that match ``logged`` in a local play of three copies of ``task``."""
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(tasks="".join(task.format(n=n) for n in range(3))))
    run = ansible_playbook(str(play))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return re.findall(logged, run.stdout + run.stderr, re.M)


def fleet_loads(tmp_path: Path) -> list[str]:
    """Each time a process loaded the project's 'fleet' filter plugin in a three-task play (Ansible's debug
    log names the main process's id even in the per-task processes, so the lines are counted, not the ids; a
    load from the loader's cache says so and is not counted)."""
    return three_task_play(
        tmp_path, TASK, r"^\s*(\d+) [\d.]+: Loading FilterModule '\S+\.filter\.fleet' from \S+$"
    )


def test_the_filters_are_loaded_once_before_the_tasks_fork(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANSIBLE_DEBUG", "1")
    assert len(fleet_loads(tmp_path)) == 1


def test_without_the_callback_each_task_loads_them_again(tmp_path: Path, monkeypatch) -> None:
    """The control: what the callback saves (every task's worker loads the plugins itself)."""
    monkeypatch.setenv("ANSIBLE_DEBUG", "1")
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "ansible.posix.profile_tasks")
    assert len(fleet_loads(tmp_path)) == 3


# Three hosts on a closed loopback port, with the connection named by its FQCN as the lab's inventory and
# molecule's do: each task's worker loads the ssh connection plugin, then fails to connect at once
# (unreachable, ignored). ansible-core's main process loads the short names' configuration (ssh), not the
# FQCN's.
SSH_PLAY = """
- hosts: all
  gather_facts: false
  ignore_unreachable: true
  tasks:
    - name: Reach each host over ssh
      ansible.builtin.ping:
"""


def ssh_config_loads(tmp_path: Path) -> list[str]:
    """Each time a process read the ssh connection plugin's configuration (its DOCUMENTATION) in a play of one
    task on three hosts."""
    inventory = tmp_path / "hosts.yml"
    hosts = {
        f"h{n}": {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ansible.builtin.ssh"}
        for n in range(3)
    }
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    play = tmp_path / "play.yml"
    play.write_text(SSH_PLAY)
    run = ansible_playbook("-i", str(inventory), str(play))
    assert "h2" in run.stdout and "UNREACHABLE" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    return re.findall(
        r"Loaded config def from plugin \(connection/\S+\.connection\.ssh\)", run.stdout + run.stderr
    )


def test_the_ssh_plugin_config_is_read_once_before_the_tasks_fork(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANSIBLE_DEBUG", "1")
    monkeypatch.setenv("ANSIBLE_SSH_RETRIES", "0")
    assert len(ssh_config_loads(tmp_path)) == 1


def test_without_the_callback_each_task_reads_the_ssh_config_again(tmp_path: Path, monkeypatch) -> None:
    """The control: every host's worker parses the ssh plugin's documentation itself."""
    monkeypatch.setenv("ANSIBLE_DEBUG", "1")
    monkeypatch.setenv("ANSIBLE_SSH_RETRIES", "0")
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "ansible.posix.profile_tasks")
    assert len(ssh_config_loads(tmp_path)) == 3


# Three tasks that each call the env lookup, as the lab inventory's key path does in every task, and a filter
# that reads the launch profiles.
LOOKUP_TASK = """
    - name: Call a lookup and read the launch profiles ({n})
      ansible.builtin.debug:
        msg:
          - "{{{{ lookup('ansible.builtin.env', 'HOME') }}}}"
          - "{{{{ ('cpu' | glm5.deploy.sglang_profile).settings | length }}}}"
"""


def lookup_config_loads(tmp_path: Path) -> list[str]:
    """Each time a process read the env lookup's configuration (its DOCUMENTATION) in a three-task play."""
    logged = r"Loaded config def from plugin \(lookup/\S+\.lookup\.env\)"
    return three_task_play(tmp_path, LOOKUP_TASK, logged)


def test_the_lookups_config_is_read_once_before_the_tasks_fork(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANSIBLE_DEBUG", "1")
    assert len(lookup_config_loads(tmp_path)) == 1


def test_without_the_callback_each_task_reads_the_lookups_config_again(tmp_path: Path, monkeypatch) -> None:
    """The control: every task's worker parses the env lookup's documentation itself."""
    monkeypatch.setenv("ANSIBLE_DEBUG", "1")
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "ansible.posix.profile_tasks")
    assert len(lookup_config_loads(tmp_path)) == 3


def test_the_data_tables_are_read_before_the_tasks_fork(monkeypatch) -> None:
    """The callback fills the cached loaders of the launch profiles, lanes and known-bad table in the process
    it runs in (the main one), so the workers it forks inherit them instead of reading the files again. The
    plugins' part needs a playbook's collection loader (the plays above prove it), so it has none here."""
    from ansible_collections.glm5.deploy.plugins.callback import glm5_preload

    monkeypatch.setattr(glm5_preload, "collection_filter_names", list)
    monkeypatch.setattr(glm5_preload, "PRELOADED", ())
    from ansible_collections.glm5.deploy.plugins.module_utils import sglang_flags, sglang_known_bad

    cached = (
        sglang_flags.load_lanes_file,
        sglang_flags.load_dialects,
        sglang_flags.load_profiles,
        sglang_known_bad.load_known_bad,
    )
    for load in cached:
        load.cache_clear()
    glm5_preload.CallbackModule().v2_playbook_on_start(None)
    filled = [load.cache_info() for load in cached]
    assert [info.currsize for info in filled] == [1, 1, 1, 1]
    # The filters' own calls (filter_plugins/sglang.py) now find them: no miss.
    sglang_flags.load_lanes()
    sglang_flags.load_profiles()
    sglang_known_bad.load_known_bad()
    assert [load.cache_info().misses for load in cached] == [info.misses for info in filled]
