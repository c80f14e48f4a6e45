"""Send each Python module to its hosts with the byte-code of its sources, compiled once by the controller,
and keep the import scan of each source that the controller's payload builder makes.

A host imports a module's payload (AnsiballZ) with zipimport, which compiles every module_utils it imports at
every task and never keeps the result. This callback makes the controller's payload builder write each
source's byte-code beside it (module_utils module_bytecode): a host with the controller's Python version
imports that instead, any other host imports the source as before. The builder parses every source of a
payload to find its imports, once per module and run; the scans are kept between runs (module_utils
module_scan), so that the sources are parsed only when they change.
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
  - To build a payload, ansible-core parses each of its sources (54 for ansible.builtin.file) and walks
    the tree for the module_utils it imports. What the walk finds (a function of the source, its name and
    whether it is a package) is kept in O(cache_dir) too, in a directory per ansible-core and Python, so
    that a source is parsed again only when it changes; where each import is found, what the payload holds
    and every error stay ansible-core's own.
  - The builder's entry points are ansible-core's private payload functions; on an ansible-core without
    them the run warns and builds payloads as without this callback.
  - It also takes E(PYTHONUNBUFFERED) out of the environment that the run's tasks inherit (the
    controller's own output stays as it started). A module that runs on the controller (connection local,
    delegate_to localhost) is a Python that reads its payload from its standard input, and with
    E(PYTHONUNBUFFERED) set it reads those 360-odd KB one byte per system call, 0.19 CPU-s more a task
    (docs/journal/measurements.md). Tasks on the other hosts run in the environment their connection gives
    them, which does not carry it.
requirements:
  - enable in ansible.cfg (callbacks_enabled)
options:
  cache_dir:
    description:
      - The directory where compiled pycs are kept, in a directory per Python version, and the import
        scans, in a directory per ansible-core and Python version (all created with mode 0700 when
        missing). Entries are only ever added; removing the directory is always safe.
      - It and its directories per version must belong to the controller's user and be writable by no
        other user (a pyc is code the hosts run, a scan decides which sources a payload carries); when they
        are not, the run warns, compiles each payload's pycs and scans each source without keeping them.
    type: path
    default: ~/.ansible/glm5_module_bytecode
    env:
      - name: GLM5_MODULE_BYTECODE_DIR
    ini:
      - section: callback_glm5_module_bytecode
        key: cache_dir
"""

import importlib.util
import os
from pathlib import Path

from ansible.module_utils.ansible_release import __version__ as ansible_version
from ansible.plugins.callback import CallbackBase
from ansible_collections.glm5.deploy.plugins.module_utils import module_scan
from ansible_collections.glm5.deploy.plugins.module_utils.module_bytecode import (
    BytecodeStore,
    install,
    store_directory,
)
from ansible_collections.glm5.deploy.plugins.module_utils.template_cache import prepare


class CallbackModule(CallbackBase):
    """Installs the payload builder with byte-code and kept scans; prints nothing."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "glm5.deploy.glm5_module_bytecode"
    CALLBACK_NEEDS_ENABLED = True

    def set_options(self, task_keys=None, var_options=None, direct=None) -> None:
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        # Before the first fork: every task's process, and the module Python it starts on the controller,
        # inherits the environment without it (DOCUMENTATION).
        os.environ.pop("PYTHONUNBUFFERED", None)
        root = Path(self.get_option("cache_dir")).expanduser()
        directory = store_directory(root)
        scans = module_scan.store_directory(root, ansible_version, importlib.util.MAGIC_NUMBER)
        # A pyc is code the hosts run, a scan decides what a payload carries: a directory another user can
        # write to is not read.
        problem = prepare(directory) or prepare(scans)
        if problem is not None:
            self._display.warning(f"glm5_module_bytecode keeps no pyc or scan for this run: {problem}")
        try:
            from ansible.executor import module_common

            install(module_common, None if problem else BytecodeStore(directory))
        except (ImportError, AttributeError) as error:
            self._display.warning(f"glm5_module_bytecode is off for this run: {error}")
            return
        try:
            if problem is None:
                module_scan.install(module_common, module_scan.ScanStore(scans))
        except AttributeError as error:
            self._display.warning(f"glm5_module_bytecode keeps no scan for this run: {error}")
