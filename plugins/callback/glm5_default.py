"""Ansible's default screen output, with a progress line in place of the retry line of a long step.

A task that polls a long step (a release's install, a checkpoint's download, a server's start) in an
``until`` loop returns ``glm5_progress`` with each attempt (action async_progress, module sglang_health_wait).
Ansible's default output prints ``FAILED - RETRYING: ... (1797 retries left)`` for every attempt; this one
prints the step's progress instead - bytes, percent, rate, ETA, elapsed - at most once per host and task
every ``progress_interval`` seconds. Every other event is the default callback's.
"""

from __future__ import annotations

# Ansible's plugin documentation comes before the imports (ansible-test sanity's validate-modules).
# ruff: noqa: E402

DOCUMENTATION = """
name: glm5_default
type: stdout
short_description: Ansible's default output, with a progress line in place of a long step's retry lines
description:
  - The default stdout callback, except for the retries of a task whose result carries C(glm5_progress) (the
    action glm5.deploy.async_progress, the module glm5.deploy.sglang_health_wait), which print that progress
    line, at most once per host and task every O(progress_interval) seconds, instead of C(FAILED - RETRYING).
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
options:
  progress_interval:
    description: Seconds between two progress lines of one host and task.
    type: float
    default: 10
    env:
      - name: GLM5_PROGRESS_INTERVAL
    ini:
      - section: callback_glm5_default
        key: progress_interval
requirements:
  - set as stdout in configuration (stdout_callback = glm5.deploy.glm5_default; under ansible-runner or AWX,
    the environment variable ANSIBLE_STDOUT_CALLBACK=glm5.deploy.glm5_default)
"""

import time

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallbackModule
from ansible_collections.glm5.deploy.plugins.module_utils.progress import throttled


class CallbackModule(DefaultCallbackModule):
    """The default output; a long step's retries print its progress."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "glm5.deploy.glm5_default"

    def __init__(self) -> None:
        super().__init__()
        self._last_progress: dict[str, float] = {}

    def v2_runner_retry(self, result) -> None:
        progress = result.result.get("glm5_progress")
        if not progress:
            super().v2_runner_retry(result)
            return
        task_name = result.task_name or result.task
        key = f"{result.host.get_name()}\0{result.task._uuid}"
        if throttled(self._last_progress, key, time.monotonic(), float(self.get_option("progress_interval"))):
            return
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
        self._display.display(f"[{self.host_label(result)}] {task_name}: {progress}", color=C.COLOR_DEBUG)
