"""Load the Jinja2 filter, test and lookup plugins, the connection, shell and become plugins, and the
collection's data tables once, in the controller's main process.

Ansible runs each task of each host in a process forked from the main one. A plugin that the main process has
not loaded is loaded again in every such process:
- the project's filter plugins and the module_utils they import cost about 55 ms of controller CPU per host
  and task (docs/journal/measurements.md, issue 16);
- a connection plugin named by its FQCN (`ansible_connection: ansible.builtin.ssh`, as the lab's inventory
  has it) has its configuration read again in every task, by parsing its DOCUMENTATION YAML with its
  fragments: ansible-core's main process loads the configuration of the short names only (ssh). That was
  about a tenth of a no-op site.yml's controller CPU (docs/journal/measurements.md, issue 16, fifth part).
  The shell and become plugins are preloaded by their FQCNs for the same reason.
- a lookup plugin is loaded by the task that calls it, with its configuration, so an inventory value that
  calls one (`lookup('ansible.builtin.env', ...)`, as the lab's key path does) parsed the lookup's
  DOCUMENTATION YAML in every task of every host: 490 plugin configurations were parsed in a no-op
  site.yml on the two-node lab, 38 with these preloaded.
- the launch profiles, the lanes and the known-bad table (plugins/data) are read and cached (lru_cache) by the
  filters that use them, in the worker process that first calls one: again in every such task. So are the
  roles' argument specs, which every host's inputs read (filter sglang_role_specs), and the serving topology,
  which every node's tasks work out from the inventory's groups (filter sglang_topology): the topology is
  worked out here at each play's start, from that play's inventory, so that no host's task pays for it.
Loaded here once, before the first fork, every task inherits them.
"""

from __future__ import annotations

# Ansible's plugin documentation comes before the imports (ansible-test sanity's validate-modules).
# ruff: noqa: E402

DOCUMENTATION = """
name: glm5_preload
type: aggregate
short_description: Load the Jinja2, lookup, connection, shell and become plugins once, before tasks fork
description:
  - Loads every filter and test plugin, the file, env, template and pipe lookups, the ssh, local, sh and sudo
    plugins with their configuration, and the collection's launch profiles, lanes and known-bad table, in the
    main process, so that the per-task worker processes inherit them instead of loading them again for each
    host and task.
requirements:
  - enable in ansible.cfg (callbacks_enabled)
"""

import contextlib
import importlib
import pkgutil
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import (
    become_loader,
    connection_loader,
    filter_loader,
    lookup_loader,
    shell_loader,
    test_loader,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    load_dialects,
    load_lanes,
    load_profiles,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_known_bad import load_known_bad

# The collection's own filters (glm5.deploy.<name>): filter_loader.all() lists the configured paths' plugins
# only, so these are asked for by name.
COLLECTION = "glm5.deploy"
FILTER_PACKAGE = "ansible_collections.glm5.deploy.plugins.filter"


def collection_filter_names() -> list[str]:
    """The fully qualified names of every filter the collection's filter plugins define."""
    names = []
    for info in pkgutil.iter_modules(importlib.import_module(FILTER_PACKAGE).__path__):
        module = importlib.import_module(f"{FILTER_PACKAGE}.{info.name}")
        filter_module = getattr(module, "FilterModule", None)
        if filter_module is not None:
            names.extend(f"{COLLECTION}.{name}" for name in filter_module().filters())
    return names


# The connection, shell and become plugins a run of this project uses: ssh to the nodes (the lab's too), local
# for the controller's own tasks, sh on every host, sudo where production's inventory sets become. The lookups
# its roles and inventories call (file, env, template, pipe) and its own.
PRELOADED = (
    (connection_loader, ("ansible.builtin.ssh", "ansible.builtin.local")),
    (shell_loader, ("ansible.builtin.sh",)),
    (become_loader, ("ansible.builtin.sudo",)),
    (
        lookup_loader,
        (
            "ansible.builtin.env",
            "ansible.builtin.file",
            "ansible.builtin.template",
            "ansible.builtin.pipe",
            f"{COLLECTION}.glm5_controller_run",
        ),
    ),
)
# The collection's data tables, read through the calls the filters make (lru_cache keys a call's arguments as
# written: load_lanes() fills load_lanes_file(None), the entry the filters read).
DATA_TABLES = (load_lanes, load_dialects, load_profiles, load_known_bad)


def preload_role_specs() -> None:
    """Every role's argument spec of this collection, into filter sglang_role_specs' cache."""
    from ansible_collections.glm5.deploy.plugins.filter.inputs import role_options

    collection = Path(importlib.import_module("ansible_collections.glm5.deploy").__path__[0]).resolve()
    for path in sorted(collection.glob("roles/*/meta/argument_specs.yml")):
        with contextlib.suppress(Exception):
            role_options(str(path), path.stat().st_mtime_ns)


def preload_topology(groups: Any) -> None:
    """The serving topology of these groups, into filter sglang_topology's cache."""
    from ansible_collections.glm5.deploy.plugins.filter.topology import sglang_topology

    with contextlib.suppress(Exception):
        sglang_topology(groups)


class CallbackModule(CallbackBase):
    """Preloads the plugins; prints nothing."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "glm5.deploy.glm5_preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook) -> None:
        for loader in (filter_loader, test_loader):
            for _plugin in loader.all():
                pass
        for name in collection_filter_names():
            filter_loader.get(name)
        for loader, names in PRELOADED:
            for name in names:
                loader.get(name, class_only=True)
        # Best effort: the filter that reads a broken table says what is wrong with it, in its task.
        for load in DATA_TABLES:
            with contextlib.suppress(Exception):
                load()
        preload_role_specs()

    def v2_playbook_on_play_start(self, play) -> None:
        # Best effort, like the tables: a topology the inventory breaks is named by the filter, in its task.
        with contextlib.suppress(Exception):
            preload_topology(play.get_variable_manager()._inventory.get_groups_dict())
