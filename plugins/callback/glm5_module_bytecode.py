"""Send each Python module to its hosts with the byte-code of its sources, compiled once by the controller.

A host imports a module's payload (AnsiballZ) with zipimport, which compiles every module_utils it imports at
every task and never keeps the result. This callback makes the controller's payload builder write each
source's byte-code beside it (module_utils module_bytecode): a host with the controller's Python version
imports that instead, any other host imports the source as before.
"""

from __future__ import annotations

# Ansible's plugin documentation comes before the imports (ansible-test sanity's validate-modules).
# ruff: noqa: E402

DOCUMENTATION = """
name: glm5_module_bytecode
type: aggregate
short_description: Send Python modules to hosts with their byte-code, so that no host compiles them per task
description:
  - Installs, in the controller's main process and before tasks fork, a payload builder that writes each
    Python source of a module's payload (AnsiballZ) with its byte-code beside it, as a checked hash-based
    pyc (PEP 552) compiled by the controller's Python.
  - A host whose Python has the controller's version imports the byte-code instead of compiling the module
    and its module_utils at every task (on a lab node, Debian 12 and Python 3.11, ansible.builtin.command
    took 0.13-0.18 CPU-s a run against 0.23-0.30). Any other host, and any source whose hash does not match,
    imports the source as before.
  - A payload is about three times as many bytes (ansible.builtin.command 126 KB, zipped, against 359 KB).
  - Payloads with a debugger or coverage extension get no byte-code (those map the source files' paths).
  - ansible-core builds a module's payload once per run; the pycs are kept in O(cache_dir), one file per
    source, so that later runs read them instead of compiling again.
  - The builder's entry points are ansible-core's private payload functions; on an ansible-core without
    them the run warns and builds payloads as without this callback.
requirements:
  - enable in ansible.cfg (callbacks_enabled)
options:
  cache_dir:
    description:
      - The directory where compiled pycs are kept, in a directory per Python version (both created with
        mode 0700 when missing). Entries are only ever added; removing the directory is always safe.
      - It and its directory per version must belong to the controller's user and be writable by no other
        user (a pyc is code the hosts run); when they are not, the run warns and compiles each payload's
        pycs without keeping them.
    type: path
    default: ~/.ansible/glm5_module_bytecode
    env:
      - name: GLM5_MODULE_BYTECODE_DIR
    ini:
      - section: callback_glm5_module_bytecode
        key: cache_dir
"""

from pathlib import Path

from ansible.plugins.callback import CallbackBase
from ansible_collections.glm5.deploy.plugins.module_utils.module_bytecode import (
    BytecodeStore,
    install,
    store_directory,
)
from ansible_collections.glm5.deploy.plugins.module_utils.template_cache import prepare


class CallbackModule(CallbackBase):
    """Installs the payload builder with byte-code; prints nothing."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "glm5.deploy.glm5_module_bytecode"
    CALLBACK_NEEDS_ENABLED = True

    def set_options(self, task_keys=None, var_options=None, direct=None) -> None:
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        directory = store_directory(Path(self.get_option("cache_dir")).expanduser())
        # A pyc is code the hosts run: a directory another user can write to is not read.
        problem = prepare(directory)
        if problem is not None:
            self._display.warning(f"glm5_module_bytecode keeps no pyc for this run: {problem}")
        try:
            from ansible.executor import module_common

            install(module_common, None if problem else BytecodeStore(directory))
        except (ImportError, AttributeError) as error:
            self._display.warning(f"glm5_module_bytecode is off for this run: {error}")
