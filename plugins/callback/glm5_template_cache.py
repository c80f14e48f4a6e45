"""Keep the templates the controller compiles, for every forked worker and every later run to reuse.

ansible-core 2.19 compiles each template and expression again in each worker process it forks for a host and a
task, and keeps none: 1-5 ms a template, most of what a task costs the controller per host. This callback
installs, in the main process and before the first fork, a cache of the compiled code (module_utils
template_cache) in a directory of the controller's user, so that each template is compiled once per
Python, Jinja2 and ansible-core version, and read back (a file read and an unmarshal) everywhere else.
"""

from __future__ import annotations

# Ansible's plugin documentation comes before the imports (ansible-test sanity's validate-modules).
# ruff: noqa: E402

DOCUMENTATION = """
name: glm5_template_cache
type: aggregate
short_description: Compile each Jinja2 template once, not once per host and task
description:
  - Installs a cache of compiled Jinja2 templates and expressions in the controller's main process, before
    tasks fork, so that the worker of each host and task reads a template's compiled code instead of
    compiling it again.
  - An entry is keyed by the template's source, the environment's syntax and Ansible's compile-time options,
    under a directory per Python, Jinja2 and ansible-core version; one whose filters or tests are now called
    differently is compiled anew. Entries are only ever added; removing the directory is always safe.
  - ansible-core's template source debugging (its developers' switch, which writes each compile's Python
    source to a file) bypasses the cache.
  - The compile-time options it keys on are read from ansible-core's private templating module; on an
    ansible-core without them the run warns and compiles as without the cache.
requirements:
  - enable in ansible.cfg (callbacks_enabled)
options:
  cache_dir:
    description:
      - The directory of the cache (created with mode 0700 when missing, as is its directory per version).
      - It and its directory per version must belong to the controller's user and be writable by no other
        user (an entry is code the controller runs); when they are not, the run warns and compiles as
        without the cache.
    type: path
    default: ~/.ansible/glm5_template_cache
    env:
      - name: GLM5_TEMPLATE_CACHE_DIR
    ini:
      - section: callback_glm5_template_cache
        key: cache_dir
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from ansible.module_utils.ansible_release import __version__ as ansible_version
from ansible.plugins.callback import CallbackBase
from ansible_collections.glm5.deploy.plugins.module_utils.template_cache import (
    install,
    prepare,
    version_directory,
)


def ansible_compile_options() -> Callable[[Any], tuple[Any, ...] | None]:
    """The reader of Ansible's compile-time options that reach the generated code: whether the lexer escapes
    backslashes in expressions (a compile of Ansible's own, not one Jinja2 makes at runtime), whether
    constants that look like templates are templated; None while template debugging writes each compile's
    source out. They live in ansible-core's private templating module: looked up once, here, so that an
    ansible-core without them turns the cache off (ImportError, AttributeError) instead of failing every
    compile."""
    from ansible._internal._templating._jinja_bits import _TemplateCompileContext, _TemplateConfig

    current = _TemplateCompileContext.current
    if not hasattr(_TemplateConfig, "allow_embedded_templates"):
        raise AttributeError("_TemplateConfig has no allow_embedded_templates")

    def options(env: Any) -> tuple[Any, ...] | None:
        if getattr(env, "_debuggable_template_source", False):
            return None
        compiling = current(optional=True)
        return (
            None if compiling is None else bool(compiling.escape_backslashes),
            bool(_TemplateConfig.allow_embedded_templates),
        )

    return options


class CallbackModule(CallbackBase):
    """Installs the cache; prints nothing."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "glm5.deploy.glm5_template_cache"
    CALLBACK_NEEDS_ENABLED = True

    def set_options(self, task_keys=None, var_options=None, direct=None) -> None:
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        directory = version_directory(
            Path(self.get_option("cache_dir")).expanduser(), jinja2.__version__, ansible_version
        )
        try:
            options = ansible_compile_options()
        except (ImportError, AttributeError) as error:
            self._display.warning(
                f"glm5_template_cache is off for this run: ansible-core {ansible_version}: {error}"
            )
            return
        # An entry is code the controller runs: a directory another user can write to is not read.
        problem = prepare(directory)
        if problem is not None:
            self._display.warning(f"glm5_template_cache is off for this run: {problem}")
            return
        install(directory, options)
