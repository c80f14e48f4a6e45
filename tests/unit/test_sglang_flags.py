"""Renderer, dialects, versions and profiles (plugins/module_utils/sglang_flags.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    EVIDENCE_LEVELS,
    SglangFlagError,
    compare_versions,
    evidence_line,
    evidence_of,
    load_dialects,
    load_lanes,
    load_profiles,
    missing_settings,
    render_sglang_args,
    resolve_profile,
    version_matches,
)
from hypothesis import given
from hypothesis import strategies as st

SEED_SIX = (
    "--nsa-prefill-backend trtllm --nsa-decode-backend trtllm --fp8-gemm-backend cutlass "
    "--attention-backend flashinfer --moe-runner-backend flashinfer_cutlass --disable-cuda-graph"
)

# A small hand-written dialect table, so renderer rules are tested without the generated data.
TOY = {
    "1.0": {
        "flags": {
            "--tp-size": {"dest": "tp_size", "takes_value": True},
            "--enable-metrics": {"dest": "enable_metrics", "takes_value": False},
            "--mode": {"dest": "mode", "takes_value": True, "choices": ["a", "b", "new"]},
            "--json-config": {"dest": "json_config", "takes_value": True},
            "--sizes": {"dest": "sizes", "takes_value": True, "nargs": "+"},
            "--ratio": {"dest": "ratio", "takes_value": True},
        },
        "renames": {},
        "values": {},
        "combine": [],
    },
    "0.9": {
        "flags": {
            "--tp-size": {"dest": "tp_size", "takes_value": True},
            "--old-mode": {"dest": "old_mode", "takes_value": True, "choices": ["a", "old"]},
            "--no-graph": {"dest": "no_graph", "takes_value": False},
        },
        "renames": {"mode": "old_mode"},
        "values": {"mode": {"new": "old"}},
        "combine": [
            {
                "keys": ["graph_decode", "graph_prefill"],
                "cases": [
                    {
                        "when": {"graph_decode": "disabled", "graph_prefill": "disabled"},
                        "flags": {"no_graph": True},
                    },
                    {"when": {"graph_decode": "full", "graph_prefill": None}, "flags": {}},
                ],
            }
        ],
    },
}


def _profile_args(arch: str, lane: str) -> tuple[list[str], str]:
    profile = resolve_profile(load_profiles(), arch, lane, lanes=load_lanes())
    return render_sglang_args(profile["settings"], profile["sglang_version"]), profile["sglang_version"]


def _pairs(args: list[str]) -> str:
    return " ".join(args)


# ---------------------------------------------------------------- golden tests: every lane x arch ----


GOLDEN = {
    ("sm120", "seed"): (
        "0.5.9",
        "--attention-backend flashinfer --disable-cuda-graph --dist-timeout 1800 --enable-metrics "
        "--enable-nan-detection --fp8-gemm-backend cutlass --kv-cache-dtype fp8_e4m3 "
        "--moe-runner-backend flashinfer_cutlass "
        "--nsa-decode-backend trtllm --nsa-prefill-backend trtllm --quantization modelopt_fp4 "
        "--reasoning-parser glm45 --tool-call-parser glm47 --tp-size 8 --watchdog-timeout 1800",
    ),
    ("sm120", "current"): (
        "0.5.23",
        "--attention-backend dsa --cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled "
        "--cuda-graph-max-bs-decode 256 --dist-timeout 1800 --dsa-decode-backend flashinfer_sparse_mla "
        "--dsa-prefill-backend flashinfer_sparse_mla --enable-metrics --fp8-gemm-backend cutlass "
        "--kv-cache-dtype fp8_e4m3 --moe-runner-backend flashinfer_cutlass --quantization modelopt_fp4 "
        "--reasoning-parser glm45 --tool-call-parser glm47 --tp-size 8 --watchdog-timeout 1800",
    ),
    ("sm100", "seed"): (
        "0.5.9",
        "--dist-timeout 1800 --enable-metrics --enable-nan-detection --quantization modelopt_fp4 "
        "--reasoning-parser glm45 "
        "--tool-call-parser glm47 --tp-size 8 --watchdog-timeout 1800",
    ),
    ("sm100", "current"): (
        "0.5.23",
        "--dist-timeout 1800 --enable-metrics --quantization modelopt_fp4 --reasoning-parser glm45 "
        "--tool-call-parser glm47 --tp-size 8 --watchdog-timeout 1800",
    ),
    ("sm90", "seed"): (
        "0.5.9",
        "--dist-timeout 1800 --enable-metrics --enable-nan-detection --quantization modelopt_fp4 "
        "--reasoning-parser glm45 "
        "--tool-call-parser glm47 --tp-size 8 --watchdog-timeout 1800",
    ),
    ("sm90", "current"): (
        "0.5.23",
        "--dist-timeout 1800 --enable-metrics --quantization modelopt_fp4 --reasoning-parser glm45 "
        "--tool-call-parser glm47 --tp-size 8 --watchdog-timeout 1800",
    ),
    ("cpu", "current"): (
        "0.5.23",
        "--attention-backend torch_native --cuda-graph-backend-decode disabled "
        "--cuda-graph-backend-prefill disabled --device cpu --enable-metrics --max-total-tokens 2048 "
        "--reasoning-parser glm45 --sleep-on-idle",
    ),
}


def all_profile_lanes() -> list[tuple[str, str]]:
    return sorted((arch, lane) for arch, doc in load_profiles().items() for lane in doc["lanes"])


def test_golden_covers_every_profile_lane() -> None:
    assert sorted(GOLDEN) == all_profile_lanes()


@pytest.mark.parametrize(("arch", "lane"), sorted(GOLDEN), ids=lambda v: str(v))
def test_golden_render(arch: str, lane: str) -> None:
    version, expected = GOLDEN[(arch, lane)]
    args, got_version = _profile_args(arch, lane)
    assert got_version == version
    assert _pairs(args) == expected


def test_seed_lane_sm120_renders_the_seeds_six_flags() -> None:
    args, version = _profile_args("sm120", "seed")
    assert version == "0.5.9"
    text = _pairs(args)
    six = SEED_SIX.split(" --")
    for flag in six:
        flag = flag if flag.startswith("--") else "--" + flag
        assert f" {flag} " in f" {text} ", flag
    assert "--dsa-" not in text and "--cuda-graph-backend" not in text


def test_current_lane_sm120_uses_dsa_and_cuda_graph_backends() -> None:
    args, version = _profile_args("sm120", "current")
    assert version == "0.5.23"
    text = _pairs(args)
    assert "--dsa-prefill-backend" in args and "--dsa-decode-backend" in args
    assert "--cuda-graph-backend-decode" in args and "--cuda-graph-backend-prefill" in args
    assert "--nsa-" not in text and "--disable-cuda-graph" not in args
    decode_bs = int(args[args.index("--cuda-graph-max-bs-decode") + 1])
    assert decode_bs <= 256


def test_sm120_default_lane_is_current() -> None:
    """Issue 39 item 3 (docs/lanes.md 'The SM120 default lane'): the current lane is the default; the seed
    lane stays deployable by name."""
    profiles = load_profiles()
    assert resolve_profile(profiles, "sm120", None, lanes=load_lanes())["lane"] == "current"
    assert "docs/lanes.md" in profiles["sm120"]["default_lane_source"]


def test_the_seed_lane_turns_deepgemm_jit_off_and_the_current_lane_does_not() -> None:
    """Issue 39 item 5: SGLANG_ENABLE_JIT_DEEPGEMM=0 on the seed lane only (0.5.23's SM120 indexer uses
    DeepGEMM)."""
    profiles = load_profiles()
    seed = resolve_profile(profiles, "sm120", "seed")
    assert seed["environment"]["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0"
    assert "Error 1" in seed["sources"]["environment.SGLANG_ENABLE_JIT_DEEPGEMM"]
    assert "SGLANG_ENABLE_JIT_DEEPGEMM" not in resolve_profile(profiles, "sm120", "current")["environment"]


def test_the_tp4pp2_layout_renders_pr_26928s_layout_on_the_current_lane() -> None:
    """Issue 39 item 2: PR #26928's TP4 PP2 is a layout option beside the profile's TP8."""
    profiles, lanes = load_profiles(), load_lanes()
    launch = resolve_profile(profiles, "sm120", "current", lanes=lanes, layout="tp4pp2")
    assert launch["layout"] == "tp4pp2" and launch["settings"]["tp_size"] == 4
    assert launch["settings"]["pp_size"] == 2 and launch["settings"]["disable_shared_experts_fusion"] is True
    assert "pull/26928" in launch["sources"]["tp_size"] or "PR #26928" in launch["sources"]["tp_size"]
    args = render_sglang_args(launch["settings"], "0.5.23")
    assert args[args.index("--tp-size") + 1] == "4" and args[args.index("--pp-size") + 1] == "2"
    assert "layout tp4pp2" in evidence_line(launch)
    # An inventory override still goes over the layout; the default layout is TP8.
    assert (
        resolve_profile(profiles, "sm120", "current", {"pp_size": None}, layout="tp4pp2")["settings"].get(
            "pp_size"
        )
        is None
    )
    assert resolve_profile(profiles, "sm120", "current")["settings"]["tp_size"] == 8
    with pytest.raises(SglangFlagError, match="sglang_layout 'tp2pp4' is not a layout of sm120/current"):
        resolve_profile(profiles, "sm120", "current", layout="tp2pp4")
    with pytest.raises(SglangFlagError, match=r"not a layout of sm120/seed \(has: none\)"):
        resolve_profile(profiles, "sm120", "seed", layout="tp4pp2")


# ------------------------------------------------------------------------------ renderer rules ----


def test_value_true_false_none_dict_list() -> None:
    settings = {
        "tp_size": 8,
        "enable_metrics": True,
        "mode": None,
        "json_config": {"b": 1, "a": [1, 2]},
        "ratio": 0.85,
    }
    assert render_sglang_args(settings, "1.0", dialects=TOY) == [
        "--enable-metrics",
        "--json-config",
        '{"a":[1,2],"b":1}',
        "--ratio",
        "0.85",
        "--tp-size",
        "8",
    ]
    assert render_sglang_args({"enable_metrics": False}, "1.0", dialects=TOY) == []


def test_list_is_compact_json_except_for_multi_value_flags() -> None:
    assert render_sglang_args({"json_config": [1, "x"]}, "1.0", dialects=TOY) == ["--json-config", '[1,"x"]']
    assert render_sglang_args({"sizes": [1, 2, 4]}, "1.0", dialects=TOY) == ["--sizes", "1", "2", "4"]


def test_unknown_key_names_key_and_version() -> None:
    with pytest.raises(SglangFlagError, match=r"sglang_settings\.tp_sise .*--tp-sise.*sglang 1\.0"):
        render_sglang_args({"tp_sise": 8}, "1.0", dialects=TOY)


def test_malformed_json_value_names_the_setting() -> None:
    with pytest.raises(SglangFlagError, match=r"sglang_settings\.json_model_override_args .*not valid JSON"):
        render_sglang_args({"json_model_override_args": '{"rope": '}, "0.5.23")
    with pytest.raises(SglangFlagError, match=r"sglang_settings\.kv_events_config .*not valid JSON"):
        render_sglang_args({"kv_events_config": "publisher=zmq"}, "0.5.9")


def test_json_values_that_parse_render_unchanged() -> None:
    assert render_sglang_args({"json_model_override_args": '{"a": 1}'}, "0.5.23") == [
        "--json-model-override-args",
        '{"a": 1}',
    ]
    assert render_sglang_args({"json_model_override_args": {"a": 1}}, "0.5.23") == [
        "--json-model-override-args",
        '{"a":1}',
    ]


def test_unknown_key_on_real_dialects() -> None:
    with pytest.raises(SglangFlagError, match=r"sglang_settings\.dsa_prefil_backend .*sglang 0\.5\.23"):
        render_sglang_args({"dsa_prefil_backend": "trtllm"}, "0.5.23")
    # 0.5.9 knows no per-phase prefill max batch
    with pytest.raises(SglangFlagError, match=r"cuda_graph_max_bs_prefill.*sglang 0\.5\.9"):
        render_sglang_args({"cuda_graph_max_bs_prefill": 8}, "0.5.9")


def test_unknown_version() -> None:
    with pytest.raises(SglangFlagError, match=r"sglang 9\.9\.9 has no flag dialect"):
        render_sglang_args({"tp_size": 8}, "9.9.9")


def test_equivalent_version_spelling_finds_dialect() -> None:
    assert render_sglang_args({"tp_size": 8}, "1.0.0", dialects=TOY) == ["--tp-size", "8"]


def test_dialect_rename_and_value_map() -> None:
    assert render_sglang_args({"mode": "new"}, "0.9", dialects=TOY) == ["--old-mode", "old"]
    assert render_sglang_args({"attention_backend": "dsa"}, "0.5.9") == ["--attention-backend", "nsa"]
    assert render_sglang_args({"attention_backend": "dsa"}, "0.5.23") == ["--attention-backend", "dsa"]
    assert render_sglang_args({"cuda_graph_max_bs_decode": 256}, "0.5.9") == ["--cuda-graph-max-bs", "256"]


def test_combine_rules() -> None:
    both_off = {"graph_decode": "disabled", "graph_prefill": "disabled"}
    assert render_sglang_args(both_off, "0.9", dialects=TOY) == ["--no-graph"]
    assert render_sglang_args({"graph_decode": "full"}, "0.9", dialects=TOY) == []
    with pytest.raises(SglangFlagError, match=r"graph_decode='breakable'.*no equivalent on sglang 0\.9"):
        render_sglang_args({"graph_decode": "breakable"}, "0.9", dialects=TOY)
    # the real pre-0.5.23 dialect
    real = {"cuda_graph_backend_decode": "disabled", "cuda_graph_backend_prefill": "disabled"}
    assert render_sglang_args(real, "0.5.9") == ["--disable-cuda-graph"]
    assert render_sglang_args({"cuda_graph_backend_decode": "disabled"}, "0.5.8.post1") == [
        "--disable-cuda-graph"
    ]
    assert render_sglang_args(real, "0.5.23") == [
        "--cuda-graph-backend-decode",
        "disabled",
        "--cuda-graph-backend-prefill",
        "disabled",
    ]
    with pytest.raises(SglangFlagError, match=r"no equivalent on sglang 0\.5\.9"):
        render_sglang_args({"cuda_graph_backend_prefill": "breakable"}, "0.5.9")


def test_choices_are_checked() -> None:
    with pytest.raises(SglangFlagError, match=r"'zzz' is not accepted by sglang 1\.0; choices: a, b, new"):
        render_sglang_args({"mode": "zzz"}, "1.0", dialects=TOY)
    # trtllm only became a valid NSA backend in 0.5.9
    with pytest.raises(SglangFlagError, match=r"'trtllm' is not accepted by sglang 0\.5\.8\.post1"):
        render_sglang_args({"dsa_decode_backend": "trtllm"}, "0.5.8.post1")
    assert render_sglang_args({"dsa_decode_backend": "trtllm"}, "0.5.9") == ["--nsa-decode-backend", "trtllm"]


def test_switch_and_value_shape_are_checked() -> None:
    with pytest.raises(SglangFlagError, match="is a switch"):
        render_sglang_args({"enable_metrics": "yes"}, "1.0", dialects=TOY)
    with pytest.raises(SglangFlagError, match="needs a value"):
        render_sglang_args({"tp_size": True}, "1.0", dialects=TOY)


def test_bad_key_shapes() -> None:
    for key in ("--tp-size", "tp-size", "TP_SIZE", "", "tp size"):
        with pytest.raises(SglangFlagError, match="not a flag name"):
            render_sglang_args({key: 1}, "1.0", dialects=TOY)


def test_two_keys_rendering_to_one_flag() -> None:
    with pytest.raises(SglangFlagError, match="both render to --nsa-decode-backend"):
        render_sglang_args({"dsa_decode_backend": "trtllm", "nsa_decode_backend": "trtllm"}, "0.5.9")
    with pytest.raises(SglangFlagError, match="also set directly"):
        render_sglang_args(
            {
                "cuda_graph_backend_decode": "disabled",
                "disable_cuda_graph": True,
                "cuda_graph_backend_prefill": None,
            },
            "0.5.9",
        )


# --------------------------------------------------------------------------- property tests ----

_TOY_KEYS = {"tp_size": st.integers(1, 64), "enable_metrics": st.booleans(), "ratio": st.floats(0.01, 0.99)}


@given(st.fixed_dictionaries({}, optional=_TOY_KEYS), st.randoms())
def test_render_is_deterministic_and_order_free(settings: dict[str, Any], rnd: Any) -> None:
    items = list(settings.items())
    rnd.shuffle(items)
    first = render_sglang_args(settings, "1.0", dialects=TOY)
    assert first == render_sglang_args(dict(items), "1.0", dialects=TOY)
    flags = [a for a in first if a.startswith("-")]
    assert all(re.fullmatch(r"--[a-z0-9]+(-[a-z0-9]+)*", f) for f in flags)
    assert all(f in TOY["1.0"]["flags"] for f in flags)


_REAL_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 600), st.sampled_from(["trtllm", "auto", "disabled", "x y"])
)


@given(
    st.sampled_from(["0.5.8.post1", "0.5.9", "0.5.23"]),
    st.dictionaries(
        st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=30), _REAL_VALUES, max_size=6
    ),
)
def test_real_dialects_never_emit_short_or_unknown_flags(version: str, settings: dict[str, Any]) -> None:
    """Arbitrary input either renders only full, known flag names, or fails with SglangFlagError."""
    try:
        args = render_sglang_args(settings, version)
    except SglangFlagError:
        return
    known = load_dialects()[version]["flags"]
    flags = [a for a in args if a.startswith("--") and a in known]
    # every flag token is a known full name; every other token is a value following a value-taking flag
    i = 0
    while i < len(args):
        assert args[i] in known, args
        i += 2 if known[args[i]]["takes_value"] else 1
    assert flags == sorted(flags)


# ------------------------------------------------------------------------------------ versions ----


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ("0.5.9", "0.5.9", 0),
        ("0.5.9", "0.5.9.0", 0),
        ("0.5.8.post1", "0.5.8", 1),
        ("0.5.8.post1", "0.5.9", -1),
        ("0.5.10", "0.5.9", 1),
        ("0.5.23", "0.5.3", 1),
        ("0.5.9rc1", "0.5.9", -1),
        ("0.5.9.dev1", "0.5.9rc1", -1),
        ("0.5.9.post1.dev2", "0.5.9.post1", -1),
        ("1.0", "0.99.99", 1),
    ],
)
def test_compare_versions(left: str, right: str, expected: int) -> None:
    assert compare_versions(left, right) == expected
    assert compare_versions(right, left) == -expected


def test_version_ranges() -> None:
    assert version_matches("0.5.12", ">=0.5.12,<0.5.13")
    assert not version_matches("0.5.13", ">=0.5.12,<0.5.13")
    assert version_matches("0.5.9", None)
    assert not version_matches("0.5.9", ">=0.5.10")
    with pytest.raises(SglangFlagError):
        version_matches("0.5.9", "~0.5")
    with pytest.raises(SglangFlagError):
        compare_versions("latest", "0.5.9")


# ------------------------------------------------------------------------------------ profiles ----


def test_overrides_replace_and_none_removes() -> None:
    profile = resolve_profile(
        load_profiles(),
        "sm120",
        "current",
        {"cuda_graph_max_bs_decode": 128, "kv_cache_dtype": None, "context_length": 65536},
        environment_overrides={"NCCL_P2P_DISABLE": 1, "NCCL_MIN_NCHANNELS": None},
        lanes=load_lanes(),
    )
    settings = profile["settings"]
    assert settings["cuda_graph_max_bs_decode"] == 128
    assert "kv_cache_dtype" not in settings
    assert settings["context_length"] == 65536
    assert profile["sources"]["context_length"] == "inventory override"
    assert profile["environment"]["NCCL_P2P_DISABLE"] == "1"
    assert "NCCL_MIN_NCHANNELS" not in profile["environment"]
    assert profile["evidence"]["level"] == "public-report" and profile["evidence"]["rank"] < 4


def test_sm120_environment_for_pcie() -> None:
    env = resolve_profile(load_profiles(), "sm120", "seed")["environment"]
    assert env["NCCL_P2P_LEVEL"] == "SYS"
    assert env["NCCL_IB_DISABLE"] == "1"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_lane_variant_null_removes_common_entry() -> None:
    profiles = {
        "x": {
            "default_lane": "a",
            "common": {"settings": {"tp_size": {"value": 8, "source": "s"}}},
            "lanes": {
                "a": {
                    "evidence": {"level": "untested", "source": "s"},
                    "settings": {"tp_size": {"value": None, "source": "drop it"}},
                }
            },
        }
    }
    assert resolve_profile(profiles, "x", None)["settings"] == {}


def test_profile_errors() -> None:
    with pytest.raises(SglangFlagError, match="no launch profile for GPU arch 'sm75'"):
        resolve_profile(load_profiles(), "sm75", None)
    with pytest.raises(SglangFlagError, match="profile 'cpu' has no variant for lane 'seed'"):
        resolve_profile(load_profiles(), "cpu", "seed")
    bad = {"x": {"default_lane": "a", "lanes": {"a": {"settings": {"tp_size": {"value": 8}}}}}}
    with pytest.raises(SglangFlagError, match=r"x\.lanes\.a\.settings\.tp_size must be a mapping"):
        resolve_profile(bad, "x", None)


# ------------------------------------------------------------------------------- data integrity ----


def test_every_profile_entry_has_a_source_and_evidence() -> None:
    for arch, doc in load_profiles().items():
        assert doc.get("default_lane") in doc["lanes"], arch
        for lane, variant in doc["lanes"].items():
            evidence_of(variant, f"{arch}.{lane}")
            assert variant.get("source"), (arch, lane)
            # resolve_profile insists on {value, source} for every entry
            resolve_profile(load_profiles(), arch, lane, lanes=load_lanes())


def test_every_lane_has_a_dialect_and_source() -> None:
    dialects = load_dialects()
    for name, lane in load_lanes().items():
        assert lane.get("source") and lane.get("pins_source"), name
        assert str(lane["sglang_version"]) in dialects, name
        assert lane.get("driver_min") and lane.get("cuda"), name
    for version, dialect in dialects.items():
        assert dialect.get("source"), version
        assert dialect["flags"], version
        for rule in dialect.get("combine") or []:
            assert rule.get("source"), version


def test_generated_flag_tables_match_their_versions() -> None:
    for version, dialect in load_dialects().items():
        assert "--model-path" in dialect["flags"], version
        for flag, spec in dialect["flags"].items():
            assert flag.startswith("--") and isinstance(spec["takes_value"], bool), (version, flag)
        json.dumps(dialect["flags"])  # plain data


def test_facts_from_the_wheels() -> None:
    """The CLI facts the dialects rest on, as recorded from the real parsers."""
    d = load_dialects()
    assert "trtllm" not in d["0.5.8.post1"]["flags"]["--nsa-prefill-backend"]["choices"]
    assert "trtllm" in d["0.5.9"]["flags"]["--nsa-prefill-backend"]["choices"]
    assert "--nsa-prefill-backend" not in d["0.5.23"]["flags"]
    assert "--cuda-graph-max-bs" not in d["0.5.23"]["flags"]
    assert d["0.5.23"]["flags"]["--disable-cuda-graph"].get("deprecated") is True
    assert "flashinfer_sparse_mla" in d["0.5.23"]["flags"]["--dsa-decode-backend"]["choices"]


def test_setting_dests_see_aliases_and_renames() -> None:
    from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import setting_dests

    assert setting_dests("model") == {"model", "model_path"}
    assert setting_dests("tensor_parallel_size") == {"tensor_parallel_size", "tp_size"}
    assert setting_dests("nccl_init_addr") == {"nccl_init_addr", "dist_init_addr"}
    assert "nsa_decode_backend" in setting_dests("dsa_decode_backend")  # renamed on the seed lane
    assert setting_dests("tp_sise") == {"tp_sise"}
    assert setting_dests("sizes", TOY) == {"sizes"}


# ------------------------------------------------------------------------------------ evidence ----


def test_the_shipped_lanes_say_what_proved_them() -> None:
    """Issue 15 item 1: the seed lane rests on the seed's run on another stack (nearby-run), the current
    sm120 lane on a public report, the datacenter profiles on the parser only, the lab's CPU profile on make
    test. Only the last reaches the proven rank."""
    profiles, lanes = load_profiles(), load_lanes()
    levels = {
        (arch, lane): resolve_profile(profiles, arch, lane, lanes=lanes)["evidence"]["level"]
        for arch, doc in profiles.items()
        for lane in doc["lanes"]
    }
    assert levels[("sm120", "seed")] == "nearby-run"
    assert levels[("sm120", "current")] == "public-report"
    assert {levels[k] for k in levels if k[0] in ("sm100", "sm90")} == {"parser-only"}
    assert levels[("cpu", "current")] == "lab-run"
    seed = resolve_profile(profiles, "sm120", "seed", lanes=lanes)["evidence"]
    assert seed["run"]["date"] == "2026-02-19" and "lukealonso/GLM-5-NVFP4" in seed["run"]["checkpoint"]
    assert any("nvidia/GLM-5-NVFP4" in d for d in seed["differs"])
    # Issue 39 item 2: each sm120 lane names what it serves; the current lane records PR #26928 and NVIDIA's
    # recipe as its runs.
    assert seed["serves"].startswith("dense MLA, not sparse attention")
    current = resolve_profile(profiles, "sm120", "current", lanes=lanes)["evidence"]
    assert current["serves"].startswith("DSA's sparse attention")
    assert "nvidia/GLM-5.1-NVFP4" in current["run"]["checkpoint"] and "96.9 %" in current["run"]["source"]
    assert [run["checkpoint"] for run in current["more_runs"]] == ["nvidia/GLM-5.2-NVFP4"] * 2
    assert "nvidia-gcp-samples" in current["more_runs"][0]["by"]


def test_the_evidence_line_warns_below_seed_run() -> None:
    profiles, lanes = load_profiles(), load_lanes()
    seed = evidence_line(resolve_profile(profiles, "sm120", "seed", lanes=lanes))
    assert seed.startswith("WARNING: sm120/seed (sglang 0.5.9): evidence nearby-run")
    assert "2026-02-19" in seed and "This lane differs:" in seed and "docs/hardware-validation.md" in seed
    assert "It serves dense MLA, not sparse attention" in seed
    current = evidence_line(resolve_profile(profiles, "sm120", None, lanes=lanes))
    assert current.startswith("WARNING: sm120/current (sglang 0.5.23): evidence public-report")
    assert "It serves DSA's sparse attention" in current and "(and 2 more public runs:" in current
    lab = evidence_line(resolve_profile(profiles, "cpu", "current", lanes=lanes))
    assert lab.startswith("cpu/current (sglang 0.5.23): evidence lab-run") and "WARNING" not in lab
    assert evidence_line({"arch": "x", "lane": "y"}).startswith("WARNING: x/y (sglang ?): evidence untested")


@pytest.mark.parametrize(
    ("evidence", "message"),
    [
        (None, "must be a mapping"),
        ({"level": "validated", "source": "s"}, "level must be one of"),
        ({"level": "seed-run"}, "source must say"),
        ({"level": "nearby-run", "source": "s"}, "names its run and how"),
        ({"level": "seed-run", "source": "s", "run": {"by": "me"}}, "run lacks date, source, gpu"),
    ],
)
def test_evidence_errors(evidence: dict | None, message: str) -> None:
    with pytest.raises(SglangFlagError, match=message):
        evidence_of({"evidence": evidence}, "x.lanes.a")


def test_evidence_levels_are_ordered() -> None:
    ranks = list(EVIDENCE_LEVELS.values())
    assert ranks == sorted(ranks) and EVIDENCE_LEVELS["seed-run"] == EVIDENCE_LEVELS["lab-run"]


def test_the_seed_lane_has_no_tls_flags_and_the_current_lane_has_them() -> None:
    """TLS from the router to the nodes: preflight refuses a node certificate on a lane without --ssl-*."""
    tls = ["ssl_certfile", "ssl_keyfile", "ssl_ca_certs"]
    assert missing_settings(tls, "0.5.9") == tls
    assert missing_settings(tls, "0.5.23") == []
    assert missing_settings(["tp_size", "no_such_setting"], "0.5.23") == ["no_such_setting"]
