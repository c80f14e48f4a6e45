"""Render sglang launch flags from settings, per sglang version, and resolve launch profiles.

The knowledge lives in plugins/data (lanes.yml, profiles/*.yml, sglang_cli/*.json); this module only
reads it. Everything here is pure and deterministic: the data is loaded once and cached, and every function
also takes the data explicitly so tests (or a module on a target host) can pass their own.

Settings keys are sglang 0.5.23's long flag names with dashes turned into underscores. A dialect maps them
onto the flags of one sglang release:

- ``renames``: key -> the flag name (underscored) that release uses instead (``dsa_decode_backend`` ->
  ``nsa_decode_backend`` before the rename);
- ``values``: key -> {our value: that release's value} (``attention_backend: {dsa: nsa}``);
- ``combine``: several keys that together become other flags (both cuda-graph backends ``disabled`` ->
  ``--disable-cuda-graph``); the first case whose ``when`` matches wins, none matching is an error;
- ``flags``: the release's long options as read from its real parser (takes_value, choices, nargs).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[1] / "data"

_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_VERSION_RE = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre_l>a|b|rc)(?P<pre_n>\d*))?"
    r"(?:[-_.]?post(?P<post>\d*))?"
    r"(?:[-_.]?dev(?P<dev>\d*))?"
    r"(?:\+[a-z0-9.]+)?$",
    re.IGNORECASE,
)
_SPEC_RE = re.compile(r"^(>=|<=|==|!=|>|<)\s*(\S+)$")
_PRE_ORDER = {"a": 0, "b": 1, "rc": 2}


class SglangFlagError(ValueError):
    """A setting, a version or the data cannot be rendered; the message names it and says what to do."""


# --------------------------------------------------------------------------------------------------------
# Versions (packaging-free: module_utils may run on hosts without it)
# --------------------------------------------------------------------------------------------------------


def version_key(version: str) -> tuple[Any, ...]:
    """A sort key for PEP 440-style versions X.Y.Z[aN|bN|rcN][.postN][.devN][+local]."""
    match = _VERSION_RE.match(str(version).strip())
    if not match:
        raise SglangFlagError(f"cannot read sglang version {version!r}: expected X.Y.Z[.postN] (PEP 440)")
    release = [int(part) for part in match.group("release").split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    pre_l, post, dev = match.group("pre_l"), match.group("post"), match.group("dev")
    # Ordering within one release: X.devN < X.aN < X.bN < X.rcN < X < X.postN
    if pre_l is not None:
        pre: tuple[int, int] = (_PRE_ORDER[pre_l.lower()], int(match.group("pre_n") or 0))
    elif dev is not None and post is None:
        pre = (-1, 0)
    else:
        pre = (3, 0)
    post_key = int(post or 0) if post is not None else -1
    dev_key = int(dev or 0) if dev is not None else float("inf")
    return (tuple(release), pre, post_key, dev_key)


def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1 as left is older than, equal to or newer than right."""
    a, b = version_key(left), version_key(right)
    return (a > b) - (a < b)


def version_matches(version: str, spec: str | None) -> bool:
    """True when version satisfies every comma-separated comparison in spec (">=0.5.10,<0.6"); None = any."""
    if spec is None or str(spec).strip() == "":
        return True
    for part in str(spec).split(","):
        match = _SPEC_RE.match(part.strip())
        if not match:
            raise SglangFlagError(f"cannot read version range {spec!r}: use e.g. '>=0.5.10,<0.5.13'")
        op, other = match.groups()
        cmp = compare_versions(version, other)
        ok = {
            ">=": cmp >= 0,
            "<=": cmp <= 0,
            ">": cmp > 0,
            "<": cmp < 0,
            "==": cmp == 0,
            "!=": cmp != 0,
        }[op]
        if not ok:
            return False
    return True


# --------------------------------------------------------------------------------------------------------
# Data loading (controller side; cached)
# --------------------------------------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    """A data file of the collection (profiles, lanes, the known-bad table, the roles' argument specs), read
    safely."""
    import yaml  # PyYAML ships with ansible-core; imported here so the pure functions need nothing.

    with path.open(encoding="utf-8") as handle:
        # libyaml's safe loader when PyYAML has it: the same documents, about ten times faster.
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@lru_cache(maxsize=8)
def load_lanes_file(data_dir: str | None = None) -> dict[str, Any]:
    """lanes.yml as a dict with ``lanes`` and ``dialects``."""
    base = Path(data_dir) if data_dir else DATA_DIR
    doc = load_yaml(base / "lanes.yml")
    if not isinstance(doc, dict) or "lanes" not in doc or "dialects" not in doc:
        raise SglangFlagError(f"{base / 'lanes.yml'} must hold the mappings 'lanes' and 'dialects'")
    return doc


def load_lanes(data_dir: str | None = None) -> dict[str, Any]:
    """The lanes from lanes.yml: name -> {sglang_version, pins, ...}."""
    return dict(load_lanes_file(data_dir)["lanes"])


def lane_toolkit(lane: Mapping[str, Any], where: str = "lane") -> dict[str, str]:
    """The CUDA toolkit a lane runs on: its release (``cuda``, "X.Y"), the apt metapackage and its pinned
    version (``cuda_toolkit.version``, which must belong to that release), its directory and its source.
    Two lanes' toolkits live side by side (cuda-toolkit-12-9 in /usr/local/cuda-12.9, 13-0 in cuda-13.0)."""
    release = str(lane.get("cuda", ""))
    if not re.fullmatch(r"[0-9]+\.[0-9]+", release):
        raise SglangFlagError(f"{where}: cuda must be a CUDA release like '13.0', not {release!r}")
    toolkit = lane.get("cuda_toolkit")
    if not isinstance(toolkit, Mapping) or not toolkit.get("version") or not toolkit.get("source"):
        raise SglangFlagError(f"{where}: cuda_toolkit needs a version and a source")
    version = str(toolkit["version"])
    if not version.startswith(release + "."):
        raise SglangFlagError(
            f"{where}: cuda_toolkit.version {version!r} is not a CUDA {release} release (cuda: {release!r})"
        )
    return {
        "release": release,
        "package": "cuda-toolkit-" + release.replace(".", "-"),
        "version": version,
        "home": f"/usr/local/cuda-{release}",
        "source": str(toolkit["source"]),
    }


@lru_cache(maxsize=8)
def load_dialects(data_dir: str | None = None) -> dict[str, dict[str, Any]]:
    """The dialects from lanes.yml, each with its generated ``flags`` table loaded from ``flags_file``."""
    base = Path(data_dir) if data_dir else DATA_DIR
    dialects: dict[str, dict[str, Any]] = {}
    for version, raw in load_lanes_file(data_dir)["dialects"].items():
        dialect = dict(raw)
        flags_file = dialect.get("flags_file")
        if flags_file:
            with (base / flags_file).open(encoding="utf-8") as handle:
                generated = json.load(handle)
            made_for = generated.get("sglang_version")
            if str(made_for) != str(version):
                raise SglangFlagError(
                    f"{flags_file} was generated for sglang {made_for}, not {version}: "
                    "regenerate it with tests/parser_check/parser_venvs.py regenerate"
                )
            dialect["flags"] = generated["flags"]
        dialects[str(version)] = dialect
    return dialects


@lru_cache(maxsize=8)
def load_profiles(data_dir: str | None = None) -> dict[str, dict[str, Any]]:
    """profiles/*.yml: arch -> profile."""
    base = Path(data_dir) if data_dir else DATA_DIR
    profiles: dict[str, dict[str, Any]] = {}
    for path in sorted((base / "profiles").glob("*.yml")):
        doc = load_yaml(path)
        arch = doc.get("arch") if isinstance(doc, dict) else None
        if arch != path.stem:
            raise SglangFlagError(f"{path}: 'arch' must be {path.stem!r} (the file name), found {arch!r}")
        profiles[arch] = doc
    return profiles


# --------------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------------


def _dialect_for(sglang_version: str, dialects: Mapping[str, Any] | None) -> dict[str, Any]:
    table = load_dialects() if dialects is None else dialects
    version = str(sglang_version).strip()
    if version in table:
        return dict(table[version])
    for known, dialect in table.items():  # "0.5.9" == "0.5.9.0" == "v0.5.9"
        if compare_versions(known, version) == 0:
            return dict(dialect)
    raise SglangFlagError(
        f"sglang {version} has no flag dialect (known: {', '.join(sorted(table, key=version_key))}); "
        "add one to plugins/data/lanes.yml and run the parser check (plugins/data/README.md)"
    )


def missing_settings(
    keys: Iterable[str], sglang_version: str, dialects: Mapping[str, Any] | None = None
) -> list[str]:
    """The settings of ``keys`` that sglang ``sglang_version`` has no flag for (its dialect's dests)."""
    flags = _dialect_for(sglang_version, dialects).get("flags") or {}
    dests = {spec.get("dest") for spec in flags.values()}
    return [str(key) for key in keys if str(key) not in dests]


def bench_module(sglang_version: str, dialects: Mapping[str, Any] | None = None) -> str:
    """The module of this release's serving benchmark (``python -m <it>``), from its dialect in lanes.yml."""
    module = _dialect_for(sglang_version, dialects).get("bench_module")
    if not module:
        raise SglangFlagError(
            f"sglang {sglang_version}: its dialect in plugins/data/lanes.yml has no bench_module "
            "(the serving benchmark's module, e.g. sglang.bench_serving)"
        )
    return str(module)


def _render_value(value: Any) -> str:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _apply_combine(settings: dict[str, Any], dialect: Mapping[str, Any], version: str) -> dict[str, Any]:
    """Replace each combine rule's keys by the flags of the first matching case."""
    out = dict(settings)
    for rule in dialect.get("combine") or []:
        keys = list(rule["keys"])
        current = {key: out.get(key) for key in keys}
        if all(value is None for value in current.values()) and not any(key in out for key in keys):
            continue
        for case in rule["cases"]:
            when = case.get("when") or {}
            if all(current.get(key) == when.get(key) for key in keys):
                for key in keys:
                    out.pop(key, None)
                for flag_key, flag_value in (case.get("flags") or {}).items():
                    if flag_key in out:
                        raise SglangFlagError(
                            f"settings {sorted(keys)} render to {flag_key!r} on sglang {version}, "
                            f"which is also set directly; remove one"
                        )
                    out[flag_key] = flag_value
                break
        else:
            shown = ", ".join(f"{key}={current[key]!r}" for key in keys)
            raise SglangFlagError(
                f"settings {shown} have no equivalent on sglang {version} "
                f"(see 'combine' in its dialect in plugins/data/lanes.yml)"
            )
    return out


def render_sglang_args(
    settings: Mapping[str, Any],
    sglang_version: str,
    *,
    dialects: Mapping[str, Any] | None = None,
) -> list[str]:
    """Render settings as sglang CLI arguments for sglang_version.

    A value renders as ``--flag value``; true as a bare ``--flag``; false or None is omitted; a dict or list
    as compact JSON (a list for a flag that takes several values renders as several values). Keys map to
    the version's dialect. A key the version does not know raises SglangFlagError naming key and version.
    The output is sorted by flag name, so equal settings always render the same argument list.
    """
    if not isinstance(settings, Mapping):
        raise SglangFlagError(f"sglang settings must be a mapping, got {type(settings).__name__}")
    version = str(sglang_version).strip()
    dialect = _dialect_for(version, dialects)
    for key in settings:
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise SglangFlagError(
                f"sglang_settings.{key} is not a flag name: use the long flag name with dashes as "
                "underscores (e.g. dsa_decode_backend)"
            )
    renames: Mapping[str, str] = dialect.get("renames") or {}
    value_maps: Mapping[str, Mapping[Any, Any]] = dialect.get("values") or {}
    flags: Mapping[str, Mapping[str, Any]] | None = dialect.get("flags")
    json_flags = set(dialect.get("json_flags") or ())

    # Combine rules see the settings as given (None = absent); their output flags are already in the
    # version's own names.
    combined = _apply_combine({k: v for k, v in settings.items() if v is not None}, dialect, version)
    combined_keys = set(combined) - set(settings)

    rendered: dict[str, list[str]] = {}
    origin: dict[str, str] = {}
    for key in sorted(combined):
        value = combined[key]
        if value is None or value is False:
            continue
        if key in combined_keys:
            flag_key = key
        else:
            flag_key = renames.get(key, key)
            mapping = value_maps.get(key) or {}
            if isinstance(value, (str, int)) and not isinstance(value, bool) and value in mapping:
                value = mapping[value]
        flag = "--" + flag_key.replace("_", "-")
        spec: Mapping[str, Any] = {}
        if flags is not None:
            if flag not in flags:
                raise SglangFlagError(
                    f"sglang_settings.{key} ({flag}) is not known to sglang {version}; check the spelling "
                    f"against plugins/data/{dialect.get('flags_file')} or add a mapping to the "
                    "dialect in plugins/data/lanes.yml"
                )
            spec = flags[flag]
        if flag in rendered:
            raise SglangFlagError(
                f"sglang_settings.{origin[flag]} and sglang_settings.{key} both render to {flag} on "
                f"sglang {version}"
            )
        takes_value = spec.get("takes_value", value is not True)
        if value is True:
            if takes_value and spec.get("nargs") != "?":
                raise SglangFlagError(
                    f"sglang_settings.{key} ({flag}) needs a value on sglang {version}, got true"
                )
            args = [flag]
        else:
            if flags is not None and not takes_value:
                raise SglangFlagError(
                    f"sglang_settings.{key} ({flag}) is a switch on sglang {version}: set it to true or "
                    f"false, not {value!r}"
                )
            if isinstance(value, (list, tuple)) and spec.get("nargs") in ("+", "*"):
                values = [_render_value(item) for item in value]
            else:
                values = [_render_value(value)]
            if flag in json_flags and isinstance(value, str):
                try:
                    json.loads(value)
                except ValueError as exc:
                    raise SglangFlagError(
                        f"sglang_settings.{key} ({flag}) is not valid JSON ({exc.msg} at character "
                        f"{exc.pos}): {value!r}; give a mapping or a JSON string"
                    ) from exc
            choices = spec.get("choices")
            if choices is not None:
                bad = [item for item in values if item not in choices]
                if bad:
                    raise SglangFlagError(
                        f"sglang_settings.{key} ({flag}) value {bad[0]!r} is not accepted by sglang "
                        f"{version}; "
                        f"choices: {', '.join(choices)}"
                    )
            args = [flag, *values]
        rendered[flag] = args
        origin[flag] = key
    return [arg for flag in sorted(rendered) for arg in rendered[flag]]


def setting_dests(key: str, dialects: Mapping[str, Any] | None = None) -> set[str]:
    """What a settings key sets in sglang: its flag's dest in the parser of every known release, and the key.

    Aliases show here: ``model`` sets model_path, ``tensor_parallel_size`` sets tp_size, ``nccl_init_addr``
    sets dist_init_addr. A key no release knows sets only itself.
    """
    table = load_dialects() if dialects is None else dialects
    dests = {str(key)}
    for dialect in table.values():
        flag_key = (dialect.get("renames") or {}).get(key, key)
        spec = (dialect.get("flags") or {}).get("--" + str(flag_key).replace("_", "-"))
        if spec is not None:
            dests.add(str(spec.get("dest") or flag_key))
    return dests


# --------------------------------------------------------------------------------------------------------
# Profiles
# --------------------------------------------------------------------------------------------------------


def _entries(block: Any, where: str) -> dict[str, tuple[Any, str]]:
    """{name: {value, source}} -> {name: (value, source)}, insisting on a source for every entry."""
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise SglangFlagError(f"{where} must be a mapping of name -> {{value, source}}")
    out: dict[str, tuple[Any, str]] = {}
    for name, entry in block.items():
        if not isinstance(entry, Mapping) or "value" not in entry or not entry.get("source"):
            raise SglangFlagError(f"{where}.{name} must be a mapping with 'value' and a non-empty 'source'")
        out[str(name)] = (entry["value"], str(entry["source"]))
    return out


def fail_stop_of(
    profile: Mapping[str, Any], lane: Mapping[str, Any] | None, where: str, off_reason: str | None = None
) -> dict[str, Any]:
    """How the engine stops at its first NaN for a profile on a lane (issue 40; docs/serving.md).

    The profile's ``nan_fail_stop`` ({value: bool, source}) turns it on; the lane's ``nan_fail_stop``
    (lanes.yml) says how: settings and environment entries merged into the launch, an optional ``tripwire``
    log line that the node's sglang-nan-tripwire.service turns into a stop of the service, and the
    ``journal_pattern`` its stop leaves in the journal. ``off_reason`` (sglang_nan_fail_stop_off) turns it
    off, and must say why.

    Returns {on, how, settings, environment, tripwire, journal_pattern, source, off_reason}; settings and
    environment are {name: (value, source)}, empty when off.
    """
    entry = profile.get("nan_fail_stop", {"value": False, "source": "the profile has no nan_fail_stop"})
    if not isinstance(entry, Mapping) or not isinstance(entry.get("value"), bool) or not entry.get("source"):
        raise SglangFlagError(f"{where}.nan_fail_stop must be {{value: true or false, source: ...}}")
    spec = (lane or {}).get("nan_fail_stop") or {}
    if off_reason is not None and not str(off_reason).strip():
        raise SglangFlagError(
            f"sglang_nan_fail_stop_off turns the NaN fail-stop off for {where} without a reason: give the "
            "reason as the value (it is printed at every deploy)"
        )
    off = ""
    if off_reason is not None:
        off = f"turned off by sglang_nan_fail_stop_off: {str(off_reason).strip()}"
    elif not entry["value"]:
        off = f"turned off in the profile: {entry['source']}"
    elif not spec:
        off = "this lane has no nan_fail_stop in lanes.yml"
    result: dict[str, Any] = {
        "on": not off,
        "how": str(spec.get("how", "")),
        "settings": {},
        "environment": {},
        "tripwire": "",
        "journal_pattern": str(spec.get("journal_pattern", "")),
        "source": str(spec.get("source", "")),
        "off_reason": off,
    }
    if off:
        return result
    result["settings"] = _entries(spec.get("settings"), "lanes.nan_fail_stop.settings")
    result["environment"] = _entries(spec.get("environment"), "lanes.nan_fail_stop.environment")
    result["tripwire"] = str(spec.get("tripwire") or "")
    if not result["journal_pattern"] or not result["source"]:
        raise SglangFlagError("lanes.yml nan_fail_stop needs a 'journal_pattern' and a 'source'")
    return result


# What a lane's launch profile was proven by, weakest first. A level's rank decides the warning: anything
# below seed-run (the lane's exact stack ran on that hardware and answered correctly) deploys with a warning.
# lab-run is the lab's CPU profile: real sglang on CPU in `make test`, which is all that arch ever runs on.
EVIDENCE_LEVELS: dict[str, int] = {
    "untested": 0,
    "parser-only": 1,
    "public-report": 2,
    "nearby-run": 3,
    "seed-run": 4,
    "lab-run": 4,
}
EVIDENCE_PROVEN = EVIDENCE_LEVELS["seed-run"]
EVIDENCE_MEANING = {
    "untested": "nothing: neither run nor parsed",
    "parser-only": "the rendered flags parse with the lane's real sglang; nothing ran on this hardware",
    "public-report": "a public report shows these settings serving on this hardware, on another stack",
    "nearby-run": "these settings answered correctly on this hardware in a recorded run, on another stack",
    "seed-run": "this exact stack served correct answers on this hardware in a recorded run",
    "lab-run": "real sglang serves the lab's model with these settings in every make test",
}
_RUN_FIELDS = ("gpu", "sglang", "checkpoint", "flashinfer", "driver", "cuda")


def evidence_of(variant: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A lane variant's ``evidence`` block, checked: {level, source, run?, differs}. ``run`` is the recorded
    run the level rests on (by, date, source and the stack fields), ``differs`` how the lane's own stack
    differs from that run. Levels below seed-run that rest on a run must say how it differs."""
    evidence = variant.get("evidence")
    if not isinstance(evidence, Mapping):
        raise SglangFlagError(f"{where}.evidence must be a mapping with 'level' and 'source'")
    level = evidence.get("level")
    if level not in EVIDENCE_LEVELS:
        raise SglangFlagError(
            f"{where}.evidence.level must be one of {', '.join(EVIDENCE_LEVELS)}, not {level!r}"
        )
    if not evidence.get("source"):
        raise SglangFlagError(f"{where}.evidence.source must say where the level comes from")
    run = evidence.get("run")
    more_runs = evidence.get("more_runs") or []
    if not isinstance(more_runs, list):
        raise SglangFlagError(f"{where}.evidence.more_runs must be a list of runs")
    for label, item in [("run", run), *((f"more_runs[{i}]", r) for i, r in enumerate(more_runs))]:
        if item is None:
            continue
        missing = [
            f
            for f in ("by", "date", "source", *_RUN_FIELDS)
            if not (isinstance(item, Mapping) and item.get(f))
        ]
        if missing:
            raise SglangFlagError(
                f"{where}.evidence.{label} lacks {', '.join(missing)} (write 'not recorded')"
            )
    differs = [str(d) for d in evidence.get("differs") or []]
    if level in ("nearby-run", "public-report") and (run is None or not differs):
        raise SglangFlagError(f"{where}.evidence: a {level} names its run and how the lane's stack differs")
    out = {
        "level": level,
        "rank": EVIDENCE_LEVELS[level],
        "source": str(evidence["source"]),
        "differs": differs,
    }
    if evidence.get("serves"):
        out["serves"] = " ".join(str(evidence["serves"]).split())
    if run is not None:
        out["run"] = {str(k): str(v) for k, v in run.items()}
    if more_runs:
        out["more_runs"] = [{str(k): str(v) for k, v in item.items()} for item in more_runs]
    return out


def evidence_line(launch: Mapping[str, Any]) -> str:
    """One line on what a resolved launch (resolve_profile) was proven by, for preflight and the plan; it
    starts with WARNING when the level is below seed-run."""
    evidence = launch.get("evidence") or {"level": "untested", "rank": 0, "differs": []}
    level = evidence["level"]
    layout = f" layout {launch['layout']}" if launch.get("layout") else ""
    where = f"{launch.get('arch')}/{launch.get('lane')}{layout} (sglang {launch.get('sglang_version', '?')})"
    line = f"{where}: evidence {level}: {EVIDENCE_MEANING[level]}"
    run = evidence.get("run")
    if evidence.get("serves"):
        line += f". It serves {evidence['serves']}"
    if run:
        line += (
            f". The run: {run['by']}, {run['date']}, sglang {run['sglang']}, checkpoint {run['checkpoint']}"
        )
    if evidence.get("more_runs"):
        count = len(evidence["more_runs"])
        line += (
            f" (and {count} more public run{'s' if count > 1 else ''}: "
            + "; ".join(
                f"{item['by']}, {item['date']}, checkpoint {item['checkpoint']}"
                for item in evidence["more_runs"]
            )
            + ")"
        )
    if evidence.get("differs"):
        line += ". This lane differs: " + "; ".join(evidence["differs"])
    if evidence["rank"] < EVIDENCE_PROVEN:
        line = f"WARNING: {line}. Prove it on one node first (docs/hardware-validation.md)."
    return line


def fail_stop_line(launch: Mapping[str, Any]) -> str:
    """One line on how a resolved launch's engine stops at its first NaN; WARNING when it is off."""
    fail_stop = launch.get("fail_stop") or {}
    where = f"{launch.get('arch')}/{launch.get('lane')}"
    if fail_stop.get("on"):
        tripwire = (
            " (sglang-nan-tripwire.service stops the service at its log line)"
            if fail_stop["tripwire"]
            else ""
        )
        return f"{where}: fail-stop on NaN: {fail_stop['how']}{tripwire}. Source: {fail_stop['source']}"
    return (
        f"WARNING: {where}: fail-stop on NaN is off ({fail_stop.get('off_reason') or 'no fail-stop data'}): "
        "a NaN-poisoned engine keeps serving until the guard takes it out "
        "(docs/serving.md 'Fail-stop on NaN')."
    )


def resolve_profile(
    profiles: Mapping[str, Any],
    arch: str,
    lane: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    environment_overrides: Mapping[str, Any] | None = None,
    lanes: Mapping[str, Any] | None = None,
    layout: str | None = None,
    fail_stop_off: str | None = None,
) -> dict[str, Any]:
    """The launch profile for arch on lane (None = the profile's default lane).

    Returns {arch, lane, layout, sglang_version (when lanes are given), evidence (evidence_of), settings,
    environment, sources}. ``layout`` names one of the lane variant's ``layouts`` (None = the profile's own),
    whose settings go over the lane's. overrides (inventory) replace any setting; an override of None removes
    it. ``fail_stop`` (:func:`fail_stop_of`, with ``fail_stop_off`` its reason to be off) adds the lane's NaN
    fail-stop settings and environment over the profile's, under the inventory's overrides.
    """
    if arch not in profiles:
        raise SglangFlagError(
            f"no launch profile for GPU arch {arch!r} (have: {', '.join(sorted(profiles))}); add "
            f"plugins/data/profiles/{arch}.yml (plugins/data/README.md)"
        )
    profile = profiles[arch]
    lane_name = lane or profile.get("default_lane")
    variants = profile.get("lanes") or {}
    if lane_name not in variants:
        raise SglangFlagError(
            f"profile {arch!r} has no variant for lane {lane_name!r} (has: {', '.join(sorted(variants))}); "
            f"set sglang_lane to one of those or add the variant to profiles/{arch}.yml"
        )
    variant = variants[lane_name]
    common = profile.get("common") or {}

    layouts = variant.get("layouts") or {}
    if layout and layout not in layouts:
        raise SglangFlagError(
            f"sglang_layout {layout!r} is not a layout of {arch}/{lane_name} (has: "
            f"{', '.join(sorted(layouts)) or 'none'}); leave it empty for the profile's own layout"
        )
    layers: list[tuple[str, Mapping[str, Any]]] = [
        (f"{arch}.common", common),
        (f"{arch}.lanes.{lane_name}", variant),
    ]
    if layout:
        if not (layouts[layout] or {}).get("source"):
            raise SglangFlagError(f"{arch}.lanes.{lane_name}.layouts.{layout} needs a 'source'")
        layers.append((f"{arch}.lanes.{lane_name}.layouts.{layout}", layouts[layout]))

    settings: dict[str, Any] = {}
    environment: dict[str, str] = {}
    sources: dict[str, str] = {}
    for block_name, target in (("settings", settings), ("environment", environment)):
        for layer_name, layer in layers:
            for name, (value, source) in _entries(
                layer.get(block_name), f"{layer_name}.{block_name}"
            ).items():
                tag = name if block_name == "settings" else f"environment.{name}"
                if value is None:
                    target.pop(name, None)
                    sources.pop(tag, None)
                else:
                    target[name] = value if block_name == "settings" else str(value)
                    sources[tag] = source

    fail_stop = fail_stop_of(
        profile, (lanes or {}).get(lane_name), arch, None if fail_stop_off is None else str(fail_stop_off)
    )
    for block_name, target in (("settings", settings), ("environment", environment)):
        for name, (value, source) in fail_stop.pop(block_name).items():
            target[name] = value if block_name == "settings" else str(value)
            sources[name if block_name == "settings" else f"environment.{name}"] = f"nan_fail_stop: {source}"

    for name, value in (overrides or {}).items():
        if value is None:
            settings.pop(str(name), None)
            sources.pop(str(name), None)
        else:
            settings[str(name)] = value
            sources[str(name)] = "inventory override"
    for name, value in (environment_overrides or {}).items():
        if value is None:
            environment.pop(str(name), None)
            sources.pop(f"environment.{name}", None)
        else:
            environment[str(name)] = str(value)
            sources[f"environment.{name}"] = "inventory override"

    result: dict[str, Any] = {
        "arch": arch,
        "lane": lane_name,
        "layout": layout or "",
        "layouts": sorted(layouts),
        "evidence": evidence_of(variant, f"{arch}.lanes.{lane_name}"),
        "settings": dict(sorted(settings.items())),
        "environment": dict(sorted(environment.items())),
        "sources": dict(sorted(sources.items())),
        "fail_stop": fail_stop,
    }
    if lanes is not None:
        if lane_name not in lanes:
            raise SglangFlagError(f"lane {lane_name!r} is not defined in plugins/data/lanes.yml")
        result["sglang_version"] = str(lanes[lane_name]["sglang_version"])
    return result
