"""Filters of playbooks/tune.yml (logic in module_utils/tune.py).

{{ results | sglang_tune_rank(metric) }} -> {best, table}
{{ ranking | sglang_tune_suggestion(host, base_settings, metric, date) }} -> a host_vars file's text
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.glm5.deploy.plugins.module_utils.tune import TuneError, rank, suggestion


def sglang_tune_rank(results: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    try:
        return rank(results, metric)
    except (TuneError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"sglang_tune_rank: {exc}") from exc


def sglang_tune_suggestion(
    ranking: dict[str, Any], host: str, base: dict[str, Any], metric: str, date: str
) -> str:
    try:
        return suggestion(host, ranking, base, metric, date)
    except (TuneError, KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"sglang_tune_suggestion: {exc}") from exc


class FilterModule:
    """Tuning filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"sglang_tune_rank": sglang_tune_rank, "sglang_tune_suggestion": sglang_tune_suggestion}
