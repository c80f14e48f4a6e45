"""Filters that check the inventory's inputs before any host changes (the preflight role's inputs.yml).

    {{ {'sglang_server_port': 30000, ...} | sglang_port_problems }}      -> [problem, ...]
    {{ bind_host | sglang_bind_problems(api_key, host_var, key_var) }}   -> [problem, ...]
    {{ gpu_count | sglang_gpu_problems(tp_size, host, var) }}            -> [problem, ...]
    {{ repo | sglang_checkpoint_problems(revision, source_path) }}       -> [problem, ...]
    {{ distribution | sglang_os_problems(version, supported, host) }}   -> [problem, ...]
    {{ roles | sglang_role_specs(roles_dir) }}                           -> {role: its main entry's options}
    {{ options | sglang_spec_inputs(hostvars[inventory_hostname]) }}    -> the operator's values, no secrets
    {{ options | sglang_secret_problems(hostvars[inventory_hostname]) }} -> [problem, ...] (never a value)
    {{ specs | sglang_value_problems(hostvars[inventory_hostname]) }}    -> [problem, ...] (role -> options)
    {{ sglang_settings | sglang_settings_problems(nnodes, replica, preflight_tp_size) }} -> [problem, ...]
    {{ sglang_settings | sglang_model_limit_problems(repo, [environment, ...]) }} -> [problem, ...]
    {{ ports | sglang_low_port_problems(units, roles_dir) }}            -> [problem, ...]
    {{ admin_key | sglang_admin_key_problems(var) }}                    -> [problem, ...] (never the key)
    {{ groups | sglang_key_sharing_problems(hostvars) }}                 -> [problem, ...] (never a key)
    {{ groups | sglang_inventory_problems(hostvars, need_router) }}      -> [problem, ...] (the contract)
    {{ certificate | sglang_edge_tls_problems(private_key, plain_http, port) }} -> [problem, ...] (no PEM)

Logic: module_utils/inputs_*.py, one file per family (network, keys, nodes, values, settings; the settings'
aliases from module_utils/sglang_flags.py), the inventory contract in module_utils/inventory_contract.py.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from ansible.errors import AnsibleUndefinedVariable
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.glm5.deploy.plugins.module_utils.fleet_topology import (
    ROLE_DEFAULTS,
    node_address,
    replica_place,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_keys import (
    admin_key_problems,
    edge_tls_problems,
    fleet_key_problems,
    secret_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_network import (
    bind_problems,
    low_port_problems,
    port_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_nodes import (
    checkpoint_problems,
    gpu_problems,
    lost_gpu_problems,
    os_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_settings import (
    model_limit_problems,
    settings_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inputs_values import (
    spec_inputs,
    value_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.inventory_contract import (
    CONTRACT_VARS,
    inventory_problems,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import load_yaml, setting_dests


def _provided(options: Mapping[str, Any], hostvars: Any) -> dict[str, Any]:
    """The host's values of the options it defines (hostvars templates each value on access)."""
    return {name: hostvars[name] for name in options if name in hostvars}


def sglang_port_problems(ports: Mapping[str, Any]) -> list[str]:
    return port_problems(dict(ports))


def sglang_bind_problems(bind_host: str, api_key: str, host_var: str, key_var: str) -> list[str]:
    return bind_problems(str(bind_host), str(api_key or ""), host_var=host_var, key_var=key_var)


def sglang_checkpoint_problems(repo: Any, revision: Any, source_path: Any = "") -> list[str]:
    return checkpoint_problems(str(repo), str(revision or ""), str(source_path or ""))


def sglang_gpu_problems(gpu_count: Any, tp_size: Any, host: str, var: str) -> list[str]:
    return gpu_problems(int(gpu_count), int(tp_size), host=str(host), var=str(var))


def sglang_lost_gpu_problems(
    now: Mapping[str, Any], recorded: Any, host: str, tp_size: Any = None
) -> list[str]:
    known = recorded if isinstance(recorded, Mapping) else None
    tp = None if tp_size in (None, "") else int(tp_size)
    return lost_gpu_problems(now, known, host=str(host), tp_size=tp)


def sglang_os_problems(distribution: str, version: Any, supported: Iterable[str], host: str) -> list[str]:
    return os_problems(str(distribution), str(version), [str(s) for s in supported], host=str(host))


# The collection's own roles (plugins/filter/ -> the collection's root -> roles/): the input checks read their
# argument specs and unit templates from the collection that holds them, not through another role's path.
ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"


def sglang_role_specs(roles: Iterable[str], roles_dir: str = "") -> dict[str, Any]:
    """``{role: options}`` of each role's entry point main (roles_dir/<role>/meta/argument_specs.yml; by
    default the collection's roles)."""
    base = Path(str(roles_dir)).resolve() if roles_dir else ROLES_DIR
    out = {}
    for role in roles:
        path = base / str(role) / "meta" / "argument_specs.yml"
        out[str(role)] = copy.deepcopy(role_options(str(path), path.stat().st_mtime_ns))
    return out


@functools.lru_cache(maxsize=64)
def role_options(path: str, mtime_ns: int) -> dict[str, Any]:
    """The options of the entry point main of an argument_specs.yml (cached by path and mtime: every host's
    inputs read the same files; callback glm5_preload reads them once before the tasks fork)."""
    del mtime_ns  # the cache's key only: a changed file is read again
    return dict(load_yaml(Path(path))["argument_specs"]["main"]["options"] or {})


def sglang_spec_inputs(options: Mapping[str, Any], hostvars: Any) -> dict[str, Any]:
    return spec_inputs(options, _provided(options, hostvars))


def sglang_secret_problems(options: Mapping[str, Any], hostvars: Any) -> list[str]:
    return secret_problems(options, _provided(options, hostvars))


def sglang_value_problems(specs: Mapping[str, Mapping[str, Any]], hostvars: Any) -> list[str]:
    """value_problems over the options of every role in ``specs`` (role -> options), each option once."""
    options: dict[str, Any] = {}
    for role_options in specs.values():
        options.update(role_options or {})
    return value_problems(options, _provided(options, hostvars))


def sglang_settings_problems(
    settings: Any, nnodes: Any = 1, replica: Any = "", preflight_tp_size: Any = None
) -> list[str]:
    if not isinstance(settings, Mapping):
        return []
    dests = {key: setting_dests(key) for key in settings if isinstance(key, str)}
    tp = None if preflight_tp_size in (None, "") else int(preflight_tp_size)
    return settings_problems(
        dict(settings), dests=dests, nnodes=int(nnodes or 1), replica=str(replica or ""), preflight_tp_size=tp
    )


def sglang_model_limit_problems(settings: Any, repo: Any, environments: Any = None) -> list[str]:
    """model_limit_problems with the service's environment: a mapping, or a list of them merged in order (the
    profile's sglang_environment, then sglang_server_environment); anything else is the argument spec's."""
    if not isinstance(settings, Mapping):
        return []
    env: dict[str, Any] = {}
    for one in environments if isinstance(environments, (list, tuple)) else [environments]:
        env.update(one if isinstance(one, Mapping) else {})
    dests = {key: setting_dests(key) for key in settings if isinstance(key, str)}
    return model_limit_problems(dict(settings), str(repo or ""), env, dests=dests)


def sglang_low_port_problems(
    ports: Mapping[str, Any], units: Mapping[str, str], roles_dir: str = ""
) -> list[str]:
    """low_port_problems with each port's unit template (a path under roles_dir, by default the collection's
    roles) read from disk."""
    base = Path(str(roles_dir)) if roles_dir else ROLES_DIR
    texts = {name: (f"roles/{path}", (base / str(path)).read_text()) for name, path in units.items()}
    return low_port_problems(dict(ports), texts)


def sglang_admin_key_problems(key: Any, var: str) -> list[str]:
    return admin_key_problems(key, var=str(var))


def sglang_edge_tls_problems(
    certificate: Any, private_key: Any, plain_http: Any, port: Any = 30000
) -> list[str]:
    return edge_tls_problems(certificate, private_key, plain_http, port=port)


# Which hosts hold each key: the nodes' keys on sglang_nodes, the router's on sglang_router. The clients' keys
# the edge still accepts during a rotation count as the clients' key.
_KEY_HOLDERS = {
    "sglang_router_api_key": ("sglang_router", ("sglang_router_api_key", "sglang_router_previous_api_keys")),
    "sglang_server_api_key": ("sglang_nodes", ("sglang_server_api_key",)),
    "sglang_server_admin_api_key": ("sglang_nodes", ("sglang_server_admin_api_key",)),
    "sglang_router_admin_key": ("sglang_router", ("sglang_router_admin_key",)),
}


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def sglang_key_sharing_problems(groups: Mapping[str, Any], hostvars: Any) -> list[str]:
    """fleet_key_problems over the values the inventory gives each key on the hosts that hold it (a key the
    inventory does not set has its role default: empty)."""
    return fleet_key_problems(
        {
            name: [
                value
                for host in groups.get(holder, [])
                for var in variables
                if var in hostvars[host]
                for value in _values(hostvars[host][var])
            ]
            for name, (holder, variables) in _KEY_HOLDERS.items()
        }
    )


def sglang_inventory_problems(
    groups: Mapping[str, Any], hostvars: Any, need_router: Any = False
) -> list[str]:
    """inventory_problems over the inventory's groups and the contract's variables of each of its hosts."""
    plain = {str(name): [str(h) for h in hosts] for name, hosts in groups.items()}
    hosts = {host: _contract_vars(hostvars, host) for host in plain.get("all", [])}
    return inventory_problems(plain, hosts, need_router=boolean(need_router, strict=False))


def _contract_vars(hostvars: Any, host: str) -> dict[str, Any]:
    """The contract's variables that ``host`` defines. One whose template does not resolve is left out: the
    inputs play, on that host, names it."""
    found = {}
    for var in CONTRACT_VARS:
        if var in hostvars[host]:
            try:
                value = hostvars[host][var]
            except AnsibleUndefinedVariable:
                continue
            # ansible-core 2.19 hands a value whose template does not resolve on as an Undefined.
            if not isinstance(value, jinja2.Undefined):
                found[var] = value
    return found


def sglang_input_problems(
    hostvars: Any,
    host: str,
    group_names: Iterable[str],
    groups: Mapping[str, Any],
    specs: Mapping[str, Mapping[str, Any]],
    ports: Mapping[str, Any],
    units: Mapping[str, str],
    first: Any = False,
    tp_size: Any = 8,
) -> list[str]:
    """Every problem of ``host``'s inputs at once, in one call: ports (collisions, ranges, below 1024),
    binds reachable without a key, the fleet's keys (once, on the play's ``first`` host), secrets, the
    router's admin key, the checkpoint's pin, what each value means, sglang_settings (against the replica's
    width and the checkpoint's own limits). ``specs``: the argument specs of the roles the host runs (role ->
    options); ``ports``: its listening ports by variable; ``units``: each port's unit template under the
    roles."""
    own = hostvars[host]
    names = [str(g) for g in group_names]
    node, router = "sglang_nodes" in names, "sglang_router" in names
    problems = sglang_port_problems(ports) + sglang_low_port_problems(ports, units)
    if node:
        server_host = str(own.get("sglang_server_host") or node_address(own, str(host)))
        for key_var in ("sglang_server_api_key", "sglang_server_admin_api_key"):
            problems += sglang_bind_problems(
                server_host, own.get(key_var) or "", "sglang_server_host", key_var
            )
    if router:
        problems += sglang_bind_problems(
            own.get("sglang_router_host", "0.0.0.0"),
            own.get("sglang_router_api_key") or "",
            "sglang_router_host",
            "sglang_router_api_key",
        )
    if boolean(first, strict=False):
        problems += sglang_key_sharing_problems(groups, hostvars)
    for options in specs.values():
        problems += sglang_secret_problems(options, own)
    if router:
        problems += sglang_admin_key_problems(
            own.get("sglang_router_admin_key") or "", "sglang_router_admin_key"
        )
    repo = own.get("model_checkpoint_repo", ROLE_DEFAULTS["model_checkpoint_repo"])
    if node:
        problems += sglang_checkpoint_problems(
            repo, own.get("model_checkpoint_revision", ""), own.get("model_checkpoint_source_path", "")
        )
    problems += sglang_value_problems(specs, own)
    if node:
        place = replica_place(str(host), names, groups)
        settings = own.get("sglang_settings", {})
        problems += sglang_settings_problems(settings, place["nnodes"], place["replica"], tp_size)
        environments = [own.get("sglang_environment", {}), own.get("sglang_server_environment", {})]
        problems += sglang_model_limit_problems(settings, repo, environments)
    return problems


class FilterModule:
    """Input checks of glm5-deploy."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_port_problems": sglang_port_problems,
            "sglang_bind_problems": sglang_bind_problems,
            "sglang_gpu_problems": sglang_gpu_problems,
            "sglang_lost_gpu_problems": sglang_lost_gpu_problems,
            "sglang_checkpoint_problems": sglang_checkpoint_problems,
            "sglang_os_problems": sglang_os_problems,
            "sglang_role_specs": sglang_role_specs,
            "sglang_spec_inputs": sglang_spec_inputs,
            "sglang_secret_problems": sglang_secret_problems,
            "sglang_value_problems": sglang_value_problems,
            "sglang_settings_problems": sglang_settings_problems,
            "sglang_low_port_problems": sglang_low_port_problems,
            "sglang_model_limit_problems": sglang_model_limit_problems,
            "sglang_admin_key_problems": sglang_admin_key_problems,
            "sglang_key_sharing_problems": sglang_key_sharing_problems,
            "sglang_inventory_problems": sglang_inventory_problems,
            "sglang_edge_tls_problems": sglang_edge_tls_problems,
            "sglang_input_problems": sglang_input_problems,
        }
