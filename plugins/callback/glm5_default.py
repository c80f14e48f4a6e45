"""Ansible's default screen output, with a progress line in place of the retry line of a long step, and
failures that show their message rather than the argument spec they were checked against.

A task that polls a long step (a release's install, a checkpoint's download, a server's start) in an
``until`` loop returns ``glm5_progress`` with each attempt (action async_progress, module sglang_health_wait).
Ansible's default output prints ``FAILED - RETRYING: ... (1797 retries left)`` for every attempt; this one
prints the step's progress instead - bytes, percent, rate, ETA, elapsed - at most once per host and task
every ``progress_interval`` seconds.

A failed argument-spec check (ansible.builtin.validate_argument_spec: a role's entry point, the inputs play)
returns the whole spec it checked against; a failed item of a loop with a label returns the whole item. Below
-vvv both are left out of what is printed: the failure's message (``msg``, ``argument_errors``) is the useful
line, and the item's label is already in the line's ``(item=...)``. Every other event is the default
callback's.
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
  - Below -vvv, a failed argument-spec check prints its message without the spec it checked against, and a
    failed item of a labelled loop without the item (its label is in the line).
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

# What a failed argument-spec check returns beside its message: the spec itself, kilobytes per host.
SPEC_KEYS = ("argument_spec_data", "validate_args_context")
SPEC_ACTIONS = {
    "validate_argument_spec",
    "ansible.builtin.validate_argument_spec",
    "ansible.legacy.validate_argument_spec",
}


def trim_failure(result: dict, action: str, labelled: bool, verbosity: int) -> None:
    """Leave out of a failed result what buries its message (below -vvv): the argument spec a failed check
    returns, and a labelled loop's item."""
    if verbosity >= 3:
        return
    if action in SPEC_ACTIONS:
        for key in SPEC_KEYS:
            result.pop(key, None)
    if labelled:
        result.pop("item", None)


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

    def _trim(self, result) -> None:
        loop_control = getattr(result.task, "loop_control", None)
        labelled = bool(loop_control is not None and getattr(loop_control, "label", None))
        trim_failure(result.result, str(result.task.action), labelled, self._display.verbosity)

    def v2_runner_on_failed(self, result, ignore_errors: bool = False) -> None:
        self._trim(result)
        super().v2_runner_on_failed(result, ignore_errors)

    def v2_runner_item_on_failed(self, result) -> None:
        self._trim(result)
        super().v2_runner_item_on_failed(result)
