#!/usr/bin/python
"""Documentation of the action plugin async_progress (plugins/action/async_progress.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: async_progress
short_description: Poll an async job like ansible.builtin.async_status, with a progress line of the job
description:
  - Runs M(ansible.builtin.async_status) for O(jid) and adds RV(glm5_progress), one line with what is
    measurable about the job - its own progress line, bytes done and expected, percent, rate, ETA, elapsed.
  - Use it in an C(until) loop in place of async_status; the stdout callback C(glm5.deploy.glm5_default)
    prints RV(glm5_progress) instead of the retry line, at most once per host every few seconds.
  - The action plugin of the same name does the work; this file documents it.
options:
  jid:
    description: The async job id, as async_status takes it.
    type: str
    required: true
  started:
    description: When the job started (epoch seconds on the controller), for the elapsed time and the rate.
    type: float
    required: true
  progress_file:
    description: A JSON file the job writes on the node (C(line), and C(done), C(total) in bytes when known).
    type: path
  measure_path:
    description: A directory the job fills; its size (C(du -sb)) is the bytes done.
    type: path
  expected_bytes:
    description: The size O(measure_path) is expected to reach (an estimate; the line says 'about').
    type: int
  release_slot:
    description:
      - The slot file of a job that waits for one (M(glm5.deploy.model_checkpoint)'s
        O(glm5.deploy.model_checkpoint#module:slot_file)). While the job's progress file says it waits for
        this very file, the action creates it. Put C(throttle) on the task to bound the jobs that run at once.
    type: path
attributes:
  check_mode:
    description: As async_status.
    support: full
  diff_mode:
    description: Nothing to show.
    support: none
  platform:
    description: Any host async_status supports, with C(du) for O(measure_path).
    support: full
    platforms: posix
author:
  - glm5-deploy maintainers (@glm5-deploy)
"""

EXAMPLES = r"""
- name: Wait for the package install
  glm5.deploy.async_progress:
    jid: "{{ install_job.ansible_job_id }}"
    started: "{{ install_started }}"
    measure_path: /opt/sglang/releases/0.5.23-abc
    expected_bytes: 6000000000
  register: install
  until: install.finished
  retries: 900
  delay: 2
"""

RETURN = r"""
glm5_progress:
  description: The job's progress in one line.
  type: str
  returned: always
  sample: "downloading: 3/10 files, 120.4 GB of 440.0 GB (27%), 310 MB/s, ETA 17 min 12 s, 6 min 28 s elapsed"
"""
