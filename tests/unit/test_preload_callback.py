"""glm5_preload: the project's Jinja2 plugins load once in the controller, not once per host and task."""

from __future__ import annotations

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
        msg: "{{{{ [] | glm5_proven_replicas({{}}) }}}}"
"""


def fleet_loads(tmp_path: Path) -> list[str]:
    """Each time a process loaded the project's 'fleet' filter plugin in a three-task play (Ansible's debug
    log names the main process's id even in the per-task processes, so the lines are counted, not the ids)."""
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(tasks="".join(TASK.format(n=n) for n in range(3))))
    run = ansible_playbook(str(play))
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return re.findall(r"^\s*(\d+) [\d.]+: Loading FilterModule 'fleet'", run.stdout + run.stderr, re.M)


def test_the_filters_are_loaded_once_before_the_tasks_fork(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANSIBLE_DEBUG", "1")
    assert len(fleet_loads(tmp_path)) == 1


def test_without_the_callback_each_task_loads_them_again(tmp_path: Path, monkeypatch) -> None:
    """The control: what the callback saves (every task's worker loads the plugins itself)."""
    monkeypatch.setenv("ANSIBLE_DEBUG", "1")
    monkeypatch.setenv("ANSIBLE_CALLBACKS_ENABLED", "ansible.posix.profile_tasks")
    assert len(fleet_loads(tmp_path)) == 3
