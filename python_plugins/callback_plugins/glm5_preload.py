"""Load the Jinja2 filter and test plugins once, in the controller's main process.

Ansible runs each task of each host in a process forked from the main one. A Jinja2 plugin that the main
process has not loaded is loaded again in every such process: the project's filter plugins and the
module_utils they import cost about 55 ms of controller CPU per host and task (docs/measurements.md,
issue 16). Loaded here once, before the first fork, every task inherits them.
"""

from __future__ import annotations

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader

DOCUMENTATION = """
name: glm5_preload
type: aggregate
short_description: Load the Jinja2 filter and test plugins once, before tasks fork
description:
  - Loads every filter and test plugin in the main process, so that the per-task worker processes inherit them
    instead of loading them again for each host and task.
requirements:
  - enable in ansible.cfg (callbacks_enabled)
"""


class CallbackModule(CallbackBase):
    """Preloads the Jinja2 plugins; prints nothing."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "glm5_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook) -> None:
        for loader in (filter_loader, test_loader):
            for _plugin in loader.all():
                pass
