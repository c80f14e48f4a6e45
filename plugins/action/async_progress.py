"""Action plugin: ansible.builtin.async_status, with a progress line of the job (glm5_progress) for the
stdout callback glm5_default to print in place of the retry line.

The job's status comes from async_status itself. What is measurable beside it comes from the node: a progress
file the job writes (JSON with ``line`` and, when known, ``done``/``total`` bytes and ``started``; the module
model_checkpoint writes one), or the size of a directory the job fills (``du -sb``; a pip install into its
venv) against an expected size. module_utils.progress turns them into the line.
"""

from __future__ import annotations

import base64
import json
import shlex
import time

from ansible.plugins.action import ActionBase
from ansible_collections.glm5.deploy.plugins.module_utils.progress import progress_words


class ActionModule(ActionBase):
    """async_status plus the job's progress line."""

    _VALID_ARGS = frozenset(
        ("jid", "started", "progress_file", "measure_path", "expected_bytes", "release_slot")
    )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        # What ansible.builtin.async_status's own action does: the module, told where the job files are.
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        status = self._execute_module(
            module_name="ansible.legacy.async_status",
            module_args={"jid": args["jid"], "mode": "status", "_async_dir": async_dir},
            task_vars=task_vars,
        )
        result.update(status)
        result["ansible_job_id"] = args["jid"]
        for flag in ("started", "finished"):
            result[flag] = bool(result.get(flag))
        elapsed = time.time() - float(args["started"])
        done = total = None
        line = ""
        if args.get("progress_file"):
            read = self._execute_module(
                module_name="ansible.builtin.slurp",
                module_args={"src": args["progress_file"]},
                task_vars=task_vars,
            )
            try:
                record = json.loads(base64.b64decode(read.get("content", "")).decode())
                line = str(record.get("line") or "")
                done, total = record.get("done"), record.get("total")
            except (ValueError, TypeError, AttributeError):
                record = {}
            if not isinstance(record, dict):
                record = {}
            slot = args.get("release_slot")
            if slot and record.get("waiting_for") == slot and not result.get("finished"):
                # The job waits for its slot, and this task runs for the node: its slot is now (with throttle
                # on this task, at most that many nodes are here at once). The job deletes the file.
                self._low_level_execute_command(f"touch -- {shlex.quote(slot)}")
                line = "given its download slot"
        about = False
        if args.get("measure_path"):
            measured = self._execute_module(
                module_name="ansible.builtin.command",
                module_args={"argv": ["du", "-sb", args["measure_path"]]},
                task_vars=task_vars,
            )
            try:
                done = int(str(measured.get("stdout", "")).split()[0])
                total, about = args.get("expected_bytes"), True
            except (ValueError, IndexError):
                pass
        result["glm5_progress"] = progress_words(elapsed, done, total, line, about=about)
        return result
