"""The stdout callback glm5_default: a long step's retries print its progress line, at most one per host and
task every progress_interval seconds; any other retry prints Ansible's own retry line."""

from __future__ import annotations

from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def callback() -> Any:
    spec = spec_from_file_location("glm5_default", ROOT / "plugins" / "callback" / "glm5_default.py")
    assert spec and spec.loader
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    plugin = module.CallbackModule()
    plugin.trim_failure = module.trim_failure
    plugin._plugin_options = {"progress_interval": 10.0}  # the documented default
    plugin.lines = []
    plugin._display = SimpleNamespace(display=lambda msg, **_: plugin.lines.append(msg), verbosity=0)
    plugin._print_task_banner = lambda task: plugin.lines.append(f"TASK [{task.name}]")
    plugin._run_is_verbose = lambda *_a, **_k: False
    return plugin


def retry(host: str, task: Any, **result: Any) -> Any:
    fields = {"retries": 900, "attempts": 3, **result}
    named = SimpleNamespace(get_name=lambda: host)
    return SimpleNamespace(
        result=fields, _result=fields, task_name=task.name, task=task, host=named, _host=named
    )


def test_progress_replaces_the_retry_line_once_per_interval(
    callback: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = iter([0.0, 3.0, 10.5, 11.0])
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    task = SimpleNamespace(name="Wait for the checkpoint", _uuid="t1", check_mode=False, delegate_to=None)
    for n in range(4):
        callback.v2_runner_retry(retry("gpu01", task, glm5_progress=f"downloading: {n}"))
    progress = [line for line in callback.lines if not line.startswith("TASK")]
    assert progress == [
        "[gpu01] Wait for the checkpoint: downloading: 0",
        "[gpu01] Wait for the checkpoint: downloading: 2",
    ]
    assert callback.lines[0] == "TASK [Wait for the checkpoint]"


def test_a_retry_without_progress_is_ansibles_own(callback: Any) -> None:
    task = SimpleNamespace(name="Wait for the edge", _uuid="t2", check_mode=False, delegate_to=None)
    callback.v2_runner_retry(retry("gw", task))
    assert callback.lines == ["FAILED - RETRYING: [gw]: Wait for the edge (897 retries left)."]


def test_a_failed_spec_check_prints_its_message_not_the_spec(callback: Any) -> None:
    """The inputs play's argument-spec check, failed on a production inventory without a revision: below
    -vvv, the failure shows its message; the spec (kilobytes per host) and the labelled item are left out."""
    spec = {f"model_checkpoint_option_{n}": {"type": "str", "description": "x" * 80} for n in range(40)}
    failed = {
        "failed": True,
        "msg": "Validation of arguments failed:\nmissing required arguments: model_checkpoint_revision",
        "argument_errors": ["missing required arguments: model_checkpoint_revision"],
        "argument_spec_data": spec,
        "validate_args_context": {},
        "item": {"key": "model_checkpoint", "value": spec},
    }
    trimmed = dict(failed)
    callback.trim_failure(trimmed, "ansible.builtin.validate_argument_spec", True, 0)
    assert set(trimmed) == {"failed", "msg", "argument_errors"}
    kept = dict(failed)
    callback.trim_failure(kept, "ansible.builtin.validate_argument_spec", True, 3)  # -vvv shows everything
    assert kept == failed
    other = {"failed": True, "msg": "x", "argument_spec_data": spec, "item": "a"}
    callback.trim_failure(other, "ansible.builtin.assert", False, 0)
    assert set(other) == {"failed", "msg", "argument_spec_data", "item"}
