"""Inputs checks, sglang_settings: keys the roles own, values sglang would misread, sglang's own ranges, and
the limits the model's own configuration sets.

Each check returns a list of problems, one sentence each, that names the variable to change; an empty list
means the input is fine. Pure functions over plain data, shared by the preflight role's filters
(plugins/filter/inputs.py) and the unit tests. A secret's value (a no_log option) is never part of a
message, nor is a URL that carries credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.glm5.deploy.plugins.module_utils.inputs_values import (
    LINE_BREAKS,
    numeric,
    shown,
)

# sglang's parser dest -> what to set instead. The sglang_server role renders these itself
# (roles/sglang_server/vars/main.yml: __sglang_server_node_settings, the replica's settings from
# fleet_topology.node_settings, and --config for the API key); a value in sglang_settings would be dropped
# or fight the role's.
ROLE_OWNED_SETTINGS = {
    "model_path": "set sglang_server_model_path",
    "host": "set sglang_server_host",
    "port": "set sglang_server_port",
    "served_model_name": "set sglang_server_served_model_name",
    "api_key": "set sglang_server_api_key (from a vault; the role passes it in a file, not as an argument)",
    "admin_api_key": (
        "set sglang_server_admin_api_key (from a vault; the role passes it in a file, not as an argument)"
    ),
    "config": "the role passes --config itself (the file with sglang_server_api_key and its admin key)",
    "nnodes": "put the replica's nodes in an inventory group sglang_replica_<name> (nnodes is its size)",
    "node_rank": "a node's rank is its place in its sglang_replica_<name> group (rank 0 first)",
    "dist_init_addr": "it is rank 0's sglang_server_advertise_host with sglang_server_dist_port",
    "ssl_certfile": "set sglang_server_tls_certificate (the role writes it to a file and passes its path)",
    "ssl_keyfile": "set sglang_server_tls_private_key (from a vault; the role writes it root:sglang 0640)",
    "ssl_ca_certs": "set sglang_server_ca_bundle (the role writes it to a file and passes its path)",
}
# Fractions in (0, 1] (sglang 0.5.23 srt/arg_groups/fields: schedule.py "the fraction of the memory used for
# static allocation", swa_full_tokens_ratio "should be between 0 and 1"; memory.py "fraction of the available
# host memory").
SETTING_FRACTIONS = frozenset(
    {"mem_fraction_static", "swa_full_tokens_ratio", "hicache_host_memory_fraction"}
)
# Sizes and counts that are positive when given (fields/parallel.py, schedule.py, model.py, exec_.py).
SETTING_POSITIVE = frozenset(
    {
        "tp_size",
        "dp_size",
        "pp_size",
        "ep_size",
        "max_running_requests",
        "max_queued_requests",
        "max_total_tokens",
        "max_prefill_tokens",
        "prefill_max_requests",
        "context_length",
        "page_size",
        "cuda_graph_max_bs",
        "cuda_graph_max_bs_decode",
        "cuda_graph_max_bs_prefill",
        "stream_interval",
    }
)
# Positive, or this value with its meaning (fields/schedule.py: "Setting this to -1 means disabling chunked
# prefill").
SETTING_POSITIVE_OR = {"chunked_prefill_size": (-1, "-1 turns chunked prefill off")}
# What argparse takes for a negative number rather than an option (argparse._negative_number_matcher).
NEGATIVE_NUMBER_RE = re.compile(r"-\d+|-\d*\.\d+")
_HUMAN_INT_RE = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_HUMAN_UNITS = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def setting_number(value: Any) -> float | None:
    """A setting's number as sglang reads it: a number, a numeric string or a human-readable int ('128k',
    '1Mi', sglang's human_readable_int); None for anything else (sglang's own parser judges it)."""
    number = numeric(value)
    if number is not None or not isinstance(value, str):
        return number
    match = _HUMAN_INT_RE.fullmatch(value.strip())
    return float(match.group(1)) * _HUMAN_UNITS[match.group(2)] if match else None


def _word_problems(where: str, word: Any) -> list[str]:
    """One word of a flag's value on the command line: one line, and not something sglang reads as a flag."""
    if not isinstance(word, str):
        return []
    if any(ch in word for ch in LINE_BREAKS):
        return [f"{where} holds a line break; a flag's value is one line of the service's command line"]
    if word.startswith("-") and not NEGATIVE_NUMBER_RE.fullmatch(word):
        return [
            f"{where} is {shown(word)}, which begins with a dash: sglang would take it for an option of its "
            "own. Give only the value, and set each flag as its own sglang_settings key"
        ]
    return []


def settings_problems(
    settings: Any,
    *,
    dests: Mapping[str, Iterable[str]] | None = None,
    nnodes: int = 1,
    replica: str = "",
    preflight_tp_size: int | None = None,
) -> list[str]:
    """sglang_settings that do not mean what they say.

    - a key the role owns (``dests``: key -> what it sets in sglang's parser, so an alias such as ``model``
      counts as model_path), with the variable to set instead;
    - a value or list item that begins with a dash (it would be an option of its own on the command line)
      or holds a line break;
    - a fraction outside (0, 1], a size or count that is not positive;
    - tp_size that the replica's ``nnodes`` cannot share evenly, or whose share per node is more than the
      GPUs preflight checks each node for (``preflight_tp_size``).

    None values are skipped (null removes a profile setting); values that are not numbers are left to sglang's
    parser, which the roles run before a service starts.
    """
    if not isinstance(settings, Mapping):
        return []  # the argument spec and the sglang role name a value that is not a mapping
    problems: list[str] = []
    for key, value in settings.items():
        if value is None or not isinstance(key, str):
            continue
        where = f"sglang_settings.{key}"
        sets = set((dests or {}).get(key) or ()) | {key}
        owned = sorted(sets & set(ROLE_OWNED_SETTINGS))
        if owned:
            alias = "" if owned[0] == key else f" (it sets {owned[0]})"
            problems.append(f"{where}: the role owns this{alias}; {ROLE_OWNED_SETTINGS[owned[0]]}")
            continue
        if isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                problems += _word_problems(f"{where}[{index}]", item)
        else:
            problems += _word_problems(where, value)
        number = setting_number(value)
        if number is None:
            continue
        if sets & SETTING_FRACTIONS and not 0 < number <= 1:
            problems.append(f"{where} must be a fraction in (0, 1], got {shown(value)}")
        for dest in sorted(sets & set(SETTING_POSITIVE_OR)):
            allowed, meaning = SETTING_POSITIVE_OR[dest]
            if number <= 0 and number != allowed:
                problems.append(f"{where} must be positive or {allowed} ({meaning}), got {shown(value)}")
        if sets & SETTING_POSITIVE and number <= 0:
            problems.append(f"{where} must be positive, got {shown(value)}")
        elif "tp_size" in sets and number.is_integer():
            problems += _tp_problems(where, int(number), nnodes, replica, preflight_tp_size)
    return problems


def _tp_problems(
    where: str, tp_size: int, nnodes: int, replica: str, preflight_tp_size: int | None
) -> list[str]:
    """tp_size over a replica's nodes: an even share each, at most the GPUs preflight checks each node for."""
    nodes = max(int(nnodes), 1)
    if tp_size % nodes:
        return [
            f"{where} is {tp_size}, which the {nodes} nodes of replica {replica} (inventory group "
            f"sglang_replica_{replica}) cannot share evenly; use a multiple of {nodes}"
        ]
    share = tp_size // nodes
    if preflight_tp_size is not None and share > int(preflight_tp_size):
        return [
            f"{where} is {tp_size}, so each node of the replica ({nodes} node(s)) runs {share} ranks, one "
            f"per GPU, but preflight checks each node's GPUs against preflight_tp_size {preflight_tp_size}; "
            f"set preflight_tp_size to {share} (or lower {where})"
        ]
    return []


# --------------------------------------------------------------------------------------------------------
# Settings whose limit the model's own configuration sets
# --------------------------------------------------------------------------------------------------------

# The limits of a checkpoint's config.json that sglang holds a launch to, for the checkpoints deployed by
# name. GLM-5 (model type glm_moe_dsa): max_position_embeddings 202752, num_attention_heads 64,
# n_routed_experts 256; source: transformers' GlmMoeDsaConfig (models/glm_moe_dsa), whose defaults are
# zai-org/GLM-5's ("a similar configuration to that of the GLM-5"); the FP8 and NVFP4 checkpoints quantize the
# same model. A checkpoint not named here (the lab's tiny model) is left to sglang.
_GLM5_LIMITS = {"max_position_embeddings": 202752, "num_attention_heads": 64, "n_routed_experts": 256}
MODEL_LIMITS = {
    repo.lower(): _GLM5_LIMITS for repo in ("nvidia/GLM-5-NVFP4", "zai-org/GLM-5", "zai-org/GLM-5-FP8")
}
# sglang 0.5.23 (srt/configs/model_config.py) refuses a context_length above the model's unless this is set.
LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
_ENV_TRUE = frozenset({"1", "true", "yes", "y", "on"})


def model_limit_problems(
    settings: Any,
    repo: Any,
    environment: Mapping[str, Any] | None = None,
    *,
    dests: Mapping[str, Iterable[str]] | None = None,
) -> list[str]:
    """sglang_settings past what the checkpoint's own configuration allows (MODEL_LIMITS), each of which
    sglang refuses when the server starts: context_length above max_position_embeddings (unless the service
    environment sets SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN); an attention tensor-parallel width (tp_size,
    or tp_size / dp_size with enable_dp_attention) that does not divide the attention heads; ep_size that does
    not divide the routed experts. ``dests``: each key's parser dests (aliases), as settings_problems takes
    them."""
    limits = MODEL_LIMITS.get(str(repo or "").strip().lower())
    if limits is None or not isinstance(settings, Mapping):
        return []
    found: dict[str, tuple[str, Any]] = {}
    for key, value in settings.items():
        if value is None or not isinstance(key, str):
            continue
        for dest in set((dests or {}).get(key) or ()) | {key}:
            found.setdefault(dest, (f"sglang_settings.{key}", value))
    problems = []
    env = {str(k): str(v).strip().lower() for k, v in (environment or {}).items()}
    if "context_length" in found:
        where, value = found["context_length"]
        number = setting_number(value)
        most = limits["max_position_embeddings"]
        if number is not None and number > most and env.get(LONGER_CONTEXT_ENV) not in _ENV_TRUE:
            problems.append(
                f"{where} is {shown(value)}, more than the {most} positions {repo} has "
                f"(max_position_embeddings of its config.json): sglang refuses to start. Use {most} or less"
            )
    if "tp_size" in found:
        where, value = found["tp_size"]
        tp = setting_number(value)
        dp_attention = str(found.get("enable_dp_attention", ("", False))[1]).strip().lower() in _ENV_TRUE
        dp = setting_number(found.get("dp_size", ("", 1))[1]) if dp_attention else 1.0
        heads = limits["num_attention_heads"]
        if tp and tp.is_integer() and tp > 0 and dp and dp.is_integer() and dp > 0 and int(tp) % int(dp) == 0:
            width = int(tp) // int(dp)
            if heads % width:
                split = f"tp_size / dp_size ({width})" if dp_attention and dp != 1 else f"tp_size ({width})"
                problems.append(
                    f"{where} is {shown(value)}: {repo}'s {heads} attention heads do not split evenly over "
                    f"the attention's tensor-parallel width, {split}; sglang refuses to start. Use a width "
                    f"that divides {heads}"
                )
    if "ep_size" in found:
        where, value = found["ep_size"]
        ep = setting_number(value)
        experts = limits["n_routed_experts"]
        if ep and ep.is_integer() and ep > 0 and experts % int(ep):
            problems.append(
                f"{where} is {shown(value)}, which does not divide the {experts} routed experts of {repo}: "
                f"sglang refuses to start. Use a divisor of {experts}"
            )
    return problems
