"""Filters over the sglang launch knowledge in plugins/data.

    {{ sglang_settings | sglang_args(sglang_version) }}
        -> ["--flag", "value", ...]
    {{ gpu_arch | sglang_profile(sglang_lane, settings, environment, layout, nan_fail_stop_off) }}
        -> {arch, lane, sglang_version, evidence, settings, environment, sources, fail_stop}
    {{ sglang_launch | sglang_evidence_line }}
        -> one line on what proved the launch (WARNING ... below seed-run)
    {{ sglang_launch | sglang_fail_stop_line }}
        -> one line on how the engine stops at its first NaN (WARNING ... when it is off)
    {{ settings | sglang_known_bad(gpu_arch, sglang_version, gpu_memory_mib) }}
        -> [finding, ...]
    {{ findings | sglang_known_bad_guard(sglang_allow_known_bad) }}
        -> {blocked: [...], warnings: [...]}
    {{ sglang_lane | sglang_lane }}
        -> the lane's dict from lanes.yml, with its name: {name, sglang_version, python, cuda, pins, ...}
    {{ sglang_lane | sglang_release_plan(python_version=..., interpreter=..., root=..., packages=...) }}
        -> {name, dir, venv, python, constraints, pip_args, problems, ...} (module_utils/sglang_release.py)
    {{ lookup('file', 'requirements.txt') | sglang_requirements(no_deps=false) }}
        -> the requirement lines (no_deps=true: only the lines marked '# no-deps')
    {{ pip_check_output | sglang_pip_check_problems(no_deps_packages) }}
        -> the lines that are real problems
    {{ find_result.files | sglang_releases_to_prune(keep, protected_names) }}
        -> the release directories to delete, oldest first
    {{ sglang_version | sglang_bench_command(python, url, tokenizer, output_file, concurrency, settings) }}
        -> the argv of one serving-benchmark run (the module from lanes.yml dialects: bench_module)
    {{ sglang_bench_url | sglang_bench_target(router_host, router_port, local_url) }}
        -> the URL to benchmark: the one given, else the router, else the client's own server
    {{ wheelhouse | sglang_pip_source_args }} / {{ wheelhouse | sglang_pip_environment }}
        -> pip's source arguments and environment for a wheelhouse ("" or none: PyPI)

Errors raise AnsibleFilterError with the message from module_utils (it names the key, the value, the version
and the fix).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible_collections.glm5.deploy.plugins.module_utils.bench_report import bench_command, bench_target
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    SglangFlagError,
    evidence_line,
    fail_stop_line,
    lane_toolkit,
    load_lanes,
    load_profiles,
    missing_settings,
    render_sglang_args,
    resolve_profile,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_known_bad import (
    guard,
    load_known_bad,
    match_known_bad,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_release import (
    pip_check_problems,
    pip_environment,
    pip_source_args,
    pip_source_environment,
    plan_release,
    read_requirements,
    releases_to_prune,
)


def _plain(value: Any) -> Any:
    """Ansible's tagged/lazy containers -> plain dict/list/str/int/float/bool/None."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def _wrap(func: Callable[..., Any]) -> Callable[..., Any]:
    def filter_(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*[_plain(a) for a in args], **{k: _plain(v) for k, v in kwargs.items()})
        except (SglangFlagError, ValueError, KeyError, TypeError) as exc:
            raise AnsibleFilterError(f"{func.__name__}: {exc}") from exc

    filter_.__name__ = func.__name__
    filter_.__doc__ = func.__doc__
    return filter_


def sglang_args(settings: Mapping[str, Any], version: str) -> list[str]:
    """Render settings as the CLI arguments of sglang `version`."""
    return render_sglang_args(settings, str(version))


def sglang_missing_settings(keys: Any, version: str) -> list[str]:
    """The settings among ``keys`` that sglang ``version`` has no flag for."""
    return missing_settings([str(k) for k in keys], str(version))


def sglang_profile(
    arch: str,
    lane: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    environment_overrides: Mapping[str, Any] | None = None,
    layout: str | None = None,
    fail_stop_off: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The resolved launch profile for arch on lane (None/'' = the arch's default lane), in one of the lane's
    layouts (None/'' = the profile's own). ``fail_stop_off`` (sglang_nan_fail_stop_off): profile name -> the
    reason its NaN fail-stop is off."""
    for var, value in (
        ("sglang_settings", overrides),
        ("sglang_environment", environment_overrides),
        ("sglang_nan_fail_stop_off", fail_stop_off),
    ):
        if value is not None and not isinstance(value, Mapping):
            raise SglangFlagError(f"{var} must be a mapping, got a {type(value).__name__}: {value!r}")
    return resolve_profile(
        load_profiles(),
        str(arch),
        str(lane) if lane else None,
        overrides or {},
        environment_overrides=environment_overrides or {},
        lanes=load_lanes(),
        layout=str(layout) if layout else None,
        fail_stop_off=str((fail_stop_off or {})[str(arch)] or "")
        if str(arch) in (fail_stop_off or {})
        else None,
    )


def sglang_known_bad(
    settings: Mapping[str, Any], arch: str, version: str, gpu_memory_mib: int | float | None = None
) -> list[dict[str, Any]]:
    """The known-bad entries matching these resolved settings, as dicts."""
    memory = None if gpu_memory_mib in (None, "") else float(gpu_memory_mib)
    return [f.as_dict() for f in match_known_bad(load_known_bad(), settings, str(arch), str(version), memory)]


def sglang_known_bad_guard(
    findings: list[Mapping[str, Any]], allow_known_bad: bool = False
) -> dict[str, Any]:
    """{blocked: [messages], warnings: [messages]} for findings from sglang_known_bad."""
    blocked, warnings = guard(findings, bool(allow_known_bad))
    return {"blocked": blocked, "warnings": warnings}


def sglang_lane(name: str) -> dict[str, Any]:
    """The lane called name in lanes.yml, as a dict with its ``name`` added."""
    lanes = load_lanes()
    if str(name) not in lanes:
        have = ", ".join(sorted(lanes))
        raise SglangFlagError(f"sglang_lane {name!r} is not a lane in plugins/data/lanes.yml (have: {have})")
    return {"name": str(name), **lanes[str(name)]}


def sglang_lane_toolkit(name: str) -> dict[str, str]:
    """The CUDA toolkit of the lane called name: {release, package, version, home, source}."""
    return lane_toolkit(sglang_lane(name), where=f"lanes.yml lane {name!r}")


def sglang_release_plan(
    lane: str,
    *,
    python_version: str,
    interpreter: str,
    root: str,
    packages: list[str],
    no_deps_packages: list[str] | None = None,
    extra_constraints: list[str] | None = None,
    wheelhouse: str | None = None,
    torch_index: str | None = None,
    import_modules: list[str] | None = None,
) -> dict[str, Any]:
    """The release that lane's pins, these package lists and this interpreter make (see sglang_release.py)."""
    return plan_release(
        str(lane),
        sglang_lane(lane),
        python_version=str(python_version),
        interpreter=str(interpreter),
        root=str(root),
        packages=list(packages),
        no_deps_packages=list(no_deps_packages or []),
        extra_constraints=list(extra_constraints or []),
        wheelhouse=wheelhouse or None,
        torch_index=torch_index or None,
        import_modules=list(import_modules or []),
    )


def sglang_requirements(text: str, no_deps: bool = False) -> list[str]:
    """The requirement lines of a requirements file; no_deps picks the lines marked '# no-deps'."""
    packages, no_deps_packages = read_requirements(str(text))
    return no_deps_packages if no_deps else packages


def sglang_pip_check_problems(output: str, no_deps_packages: list[str]) -> list[str]:
    """The lines of `pip check` output that are not explained by the --no-deps packages."""
    return pip_check_problems(str(output), list(no_deps_packages))


def sglang_releases_to_prune(
    found: list[dict[str, Any]], keep: int, protected: list[str | None] | None = None
) -> list[str]:
    """Paths of the release directories (ansible.builtin.find results) to delete, oldest first.

    protected holds release names or paths (current, previous, the selected release); empty entries are
    ignored.
    """
    by_name = {str(entry["path"]).rstrip("/").rsplit("/", 1)[-1]: entry for entry in found}
    names = {str(p).rstrip("/").rsplit("/", 1)[-1] for p in protected or [] if p}
    doomed = releases_to_prune({n: float(e.get("mtime", 0)) for n, e in by_name.items()}, int(keep), names)
    return [str(by_name[name]["path"]) for name in doomed]


def sglang_pip_source_args(wheelhouse: str | None) -> list[str]:
    """pip's source arguments for a wheelhouse (offline: --no-index --find-links), or none for PyPI."""
    return pip_source_args(wheelhouse, None)


def sglang_pip_environment(wheelhouse: str | None) -> dict[str, str]:
    """pip's environment, with the wheelhouse as PIP_* variables; with a wheelhouse the host's pip
    configuration cannot add indexes."""
    return {**pip_environment(bool((wheelhouse or "").strip())), **pip_source_environment(wheelhouse)}


class FilterModule:
    """sglang launch filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_args": _wrap(sglang_args),
            "sglang_missing_settings": _wrap(sglang_missing_settings),
            "sglang_profile": _wrap(sglang_profile),
            "sglang_evidence_line": _wrap(evidence_line),
            "sglang_fail_stop_line": _wrap(fail_stop_line),
            "sglang_known_bad": _wrap(sglang_known_bad),
            "sglang_known_bad_guard": _wrap(sglang_known_bad_guard),
            "sglang_lane": _wrap(sglang_lane),
            "sglang_lane_toolkit": _wrap(sglang_lane_toolkit),
            "sglang_release_plan": _wrap(sglang_release_plan),
            "sglang_requirements": _wrap(sglang_requirements),
            "sglang_pip_check_problems": _wrap(sglang_pip_check_problems),
            "sglang_releases_to_prune": _wrap(sglang_releases_to_prune),
            "sglang_pip_source_args": _wrap(sglang_pip_source_args),
            "sglang_pip_environment": _wrap(sglang_pip_environment),
            "sglang_bench_command": _wrap(bench_command),
            "sglang_bench_target": _wrap(bench_target),
        }


if __name__ == "__main__":  # pragma: no cover - manual use: python sglang.py sm120 [lane]
    profile = sglang_profile(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    print(" ".join(sglang_args(profile["settings"], profile["sglang_version"])))
