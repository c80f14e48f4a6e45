"""The known-bad guard (plugins/module_utils/sglang_known_bad.py) on every table entry."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_flags import (
    SglangFlagError,
    load_lanes,
    load_profiles,
    resolve_profile,
)
from ansible_collections.glm5.deploy.plugins.module_utils.sglang_known_bad import (
    Finding,
    guard,
    load_known_bad,
    match_known_bad,
    predicate_holds,
    validate_table,
)

RTX_PRO_6000_MIB = 97887  # 96 GB card as nvidia-smi reports it
H200_MIB = 143771

# The six backends that decide correctness, as the seed lane's sm120 profile states them.
SEED_BACKENDS = {
    "attention_backend": "flashinfer",
    "dsa_prefill_backend": "trtllm",
    "dsa_decode_backend": "trtllm",
    "moe_runner_backend": "flashinfer_cutlass",
    "fp8_gemm_backend": "cutlass",
    "kv_cache_dtype": "fp8_e4m3",
}

# For every entry: (arch, version, settings, gpu memory) that must match, and a close neighbour that must not.
CASES: dict[str, dict[str, tuple[str, str, dict[str, Any], int | None]]] = {
    # The seed's NaN (issue 39 item 3): a packed FP8 DSA KV row read by a non-DSA attention, < 0.5.10.
    "sm120-dsa-decode-flashmla-nan": {
        "positive": (
            "sm120",
            "0.5.9",
            {**SEED_BACKENDS, "dsa_prefill_backend": "flashmla_auto", "dsa_decode_backend": "flashmla_kv"},
            RTX_PRO_6000_MIB,
        ),
        "negative": ("sm120", "0.5.9", SEED_BACKENDS, RTX_PRO_6000_MIB),
    },
    "sm120-dsa-trtllm-unsupported-arch": {
        "positive": ("sm120", "0.5.23", {"dsa_prefill_backend": "trtllm"}, RTX_PRO_6000_MIB),
        "negative": (
            "sm120",
            "0.5.9",
            {"dsa_prefill_backend": "trtllm", "dsa_decode_backend": "trtllm"},
            None,
        ),
    },
    "sm120-deepgemm": {
        "positive": ("sm120", "0.5.9", {"moe_runner_backend": "deep_gemm"}, None),
        "negative": ("sm120", "0.5.23", {"fp8_gemm_backend": "deep_gemm"}, None),
    },
    "sm120-deepgemm-untested": {
        "positive": ("sm120", "0.5.23", {"fp8_gemm_backend": "deep_gemm"}, None),
        "negative": ("sm120", "0.5.9", {"fp8_gemm_backend": "deep_gemm"}, None),
    },
    "sm120-speculative-decoding": {
        "positive": ("sm120", "0.5.23", {"speculative_algorithm": "EAGLE"}, None),
        "negative": ("sm100", "0.5.23", {"speculative_algorithm": "EAGLE"}, None),
    },
    "sm120-sglang-0.5.12-deepgemm-dsa": {
        "positive": ("sm120", "0.5.12", {}, None),
        "negative": ("sm120", "0.5.13", {}, None),
    },
    "sm120-cuda-graph-max-bs-over-256-on-96gb": {
        "positive": (
            "sm120",
            "0.5.23",
            {"cuda_graph_max_bs_decode": 512, "cuda_graph_backend_decode": "full"},
            RTX_PRO_6000_MIB,
        ),
        "negative": (
            "sm120",
            "0.5.23",
            {"cuda_graph_max_bs_decode": 256, "cuda_graph_backend_decode": "full", "tp_size": 8},
            RTX_PRO_6000_MIB,
        ),
    },
    "sm120-glm-fp8-kv-dsa-backend": {
        "positive": ("sm120", "0.5.23", {"dsa_decode_backend": "tilelang"}, None),
        "negative": (
            "sm120",
            "0.5.23",
            {
                "dsa_prefill_backend": "tilelang",
                "dsa_decode_backend": "tilelang",
                "kv_cache_dtype": "bfloat16",
            },
            None,
        ),
    },
    "sm120-backend-left-to-sglang": {
        "positive": ("sm120", "0.5.9", {**SEED_BACKENDS, "dsa_decode_backend": None}, RTX_PRO_6000_MIB),
        "negative": ("sm120", "0.5.9", SEED_BACKENDS, RTX_PRO_6000_MIB),
    },
    "sm120-flashinfer-cutlass-fp4-gemm-race": {
        "positive": ("sm120", "0.5.9", {"quantization": "modelopt_fp4"}, RTX_PRO_6000_MIB),
        "negative": (
            "sm120",
            "0.5.10",
            {"quantization": "modelopt_fp4", "fp4_gemm_backend": "flashinfer_cutlass"},
            RTX_PRO_6000_MIB,
        ),
    },
    # 0.5.10 pins flashinfer 0.6.7.post2: the GEMM fix without the MoE one.
    "sm120-flashinfer-cutlass-fp4-moe-race": {
        "positive": (
            "sm120",
            "0.5.10",
            {"quantization": "modelopt_fp4", "moe_runner_backend": "flashinfer_cutlass"},
            RTX_PRO_6000_MIB,
        ),
        "negative": (
            "sm120",
            "0.5.11",
            {"quantization": "modelopt_fp4", "moe_runner_backend": "flashinfer_cutlass"},
            RTX_PRO_6000_MIB,
        ),
    },
    "sm120-dsa-full-decode-graph-hang": {
        "positive": ("sm120", "0.5.23", {"attention_backend": "dsa"}, RTX_PRO_6000_MIB),
        "negative": (
            "sm120",
            "0.5.23",
            {"attention_backend": "dsa", "cuda_graph_backend_decode": "disabled"},
            RTX_PRO_6000_MIB,
        ),
    },
    "modelopt-fp4-bf16-shared-expert-fusion": {
        "positive": ("sm100", "0.5.9", {"quantization": "modelopt_fp4"}, None),
        "negative": ("sm100", "0.5.23", {"quantization": "modelopt_fp4"}, None),
    },
    "sm90-nvfp4-checkpoint": {
        "positive": ("sm90", "0.5.23", {"quantization": "modelopt_fp4"}, H200_MIB),
        "negative": ("sm100", "0.5.23", {"quantization": "modelopt_fp4"}, None),
    },
}


def table() -> dict[str, Any]:
    return load_known_bad()


def entry_ids() -> list[str]:
    return [e["id"] for e in table()["entries"]]


def test_every_entry_has_cases() -> None:
    assert sorted(CASES) == sorted(entry_ids())


def test_issue_minimum_entries_present() -> None:
    ids = set(entry_ids())
    assert {
        "sm120-dsa-decode-flashmla-nan",
        "sm120-dsa-trtllm-unsupported-arch",
        "sm120-deepgemm",
        "sm120-cuda-graph-max-bs-over-256-on-96gb",
    } <= ids


@pytest.mark.parametrize("entry_id", sorted(CASES))
def test_entry_positive(entry_id: str) -> None:
    arch, version, settings, memory = CASES[entry_id]["positive"]
    found = [f.id for f in match_known_bad(table(), settings, arch, version, memory)]
    assert entry_id in found


@pytest.mark.parametrize("entry_id", sorted(CASES))
def test_entry_negative(entry_id: str) -> None:
    arch, version, settings, memory = CASES[entry_id]["negative"]
    found = [f.id for f in match_known_bad(table(), settings, arch, version, memory)]
    assert entry_id not in found


@pytest.mark.parametrize("entry_id", sorted(CASES))
def test_guard_on_every_entry(entry_id: str) -> None:
    arch, version, settings, memory = CASES[entry_id]["positive"]
    findings = [f for f in match_known_bad(table(), settings, arch, version, memory) if f.id == entry_id]
    entry = next(e for e in table()["entries"] if e["id"] == entry_id)
    blocked, warnings = guard(findings, allow_known_bad=False)
    if entry["severity"] == "block":
        assert len(blocked) == 1 and not warnings
        message = blocked[0]
        assert "sglang_allow_known_bad: true" in message
        # allowed: the block becomes a warning
        blocked_allowed, warnings_allowed = guard(findings, allow_known_bad=True)
        assert not blocked_allowed and "sglang_allow_known_bad is true" in warnings_allowed[0]
    else:
        assert not blocked and len(warnings) == 1
        message = warnings[0]
    assert entry_id in message
    assert " ".join(str(entry["source"]).split()) in message
    assert "Fix: " in message
    for key in findings[0].matched:
        assert key in message


def test_memory_band_and_unknown_memory() -> None:
    settings = {"cuda_graph_backend_decode": "full", "tp_size": 8}  # max bs unset: default 512 at tp >= 4
    hit = match_known_bad(table(), settings, "sm120", "0.5.23", RTX_PRO_6000_MIB)
    assert "sm120-cuda-graph-max-bs-over-256-on-96gb" in [f.id for f in hit]
    small = match_known_bad(table(), settings, "sm120", "0.5.23", 32607)  # RTX 5090, 32 GB
    assert "sm120-cuda-graph-max-bs-over-256-on-96gb" not in [f.id for f in small]
    unknown = match_known_bad(table(), settings, "sm120", "0.5.23", None)
    finding = next(f for f in unknown if f.id == "sm120-cuda-graph-max-bs-over-256-on-96gb")
    assert finding.gpu_memory_unknown and "GPU memory unknown" in guard([finding], False)[0][0]
    disabled = {"cuda_graph_backend_decode": "disabled", "tp_size": 8}
    ids = [f.id for f in match_known_bad(table(), disabled, "sm120", "0.5.9", RTX_PRO_6000_MIB)]
    assert "sm120-cuda-graph-max-bs-over-256-on-96gb" not in ids


@pytest.mark.parametrize(
    ("arch", "lane"), [("sm120", "seed"), ("sm120", "current"), ("sm100", "current"), ("cpu", "current")]
)
def test_shipped_profiles_are_not_blocked(arch: str, lane: str) -> None:
    profile = resolve_profile(load_profiles(), arch, lane, lanes=load_lanes())
    findings = match_known_bad(
        table(), profile["settings"], arch, profile["sglang_version"], RTX_PRO_6000_MIB
    )
    blocked, _ = guard(findings, allow_known_bad=False)
    assert blocked == []


@pytest.mark.parametrize("lane", ["seed", "current"])
@pytest.mark.parametrize("backend", sorted(SEED_BACKENDS))
@pytest.mark.parametrize("left", [None, "auto"])
def test_a_backend_left_to_sglang_on_sm120_is_refused(lane: str, backend: str, left: str | None) -> None:
    """Issue 15 item 3: an inventory override that removes one of the six backends (null), or sets it to
    auto, makes the shipped sm120 profile known-bad (block), naming the backend."""
    profile = resolve_profile(load_profiles(), "sm120", lane, {backend: left}, lanes=load_lanes())
    assert (
        backend in load_profiles()["sm120"]["lanes"][lane]["settings"]
        or backend in (load_profiles()["sm120"]["common"]["settings"])
    ), "the shipped profile must state it"
    findings = match_known_bad(
        table(), profile["settings"], "sm120", profile["sglang_version"], RTX_PRO_6000_MIB
    )
    blocked, _ = guard(findings, allow_known_bad=False)
    refusal = [m for m in blocked if "sm120-backend-left-to-sglang" in m]
    assert refusal and backend in refusal[0], blocked


def test_seed_settings_on_current_lane_are_blocked() -> None:
    """The seed's working set is known-bad on 0.5.23: that is why the current lane has its own profile."""
    seed = resolve_profile(load_profiles(), "sm120", "seed")["settings"]
    ids = {f.id for f in match_known_bad(table(), seed, "sm120", "0.5.23", RTX_PRO_6000_MIB)}
    assert {"sm120-dsa-trtllm-unsupported-arch", "sm120-glm-fp8-kv-dsa-backend"} <= ids


def test_guard_accepts_finding_dicts() -> None:
    finding = match_known_bad(table(), {"dsa_decode_backend": "flashmla_sparse"}, "sm120", "0.5.9")[0]
    blocked, _ = guard([finding.as_dict()], allow_known_bad=False)
    assert blocked and "dsa_decode_backend=flashmla_sparse" in blocked[0]
    assert isinstance(finding, Finding)


def test_predicates() -> None:
    assert predicate_holds({"in": ["a"]}, "a") and not predicate_holds({"in": ["a"]}, None)
    assert predicate_holds({"not_in": ["a"]}, None) and not predicate_holds({"not_in": ["a"]}, "a")
    assert predicate_holds({"gt": 256}, 512) and not predicate_holds({"gt": 256}, None)
    assert not predicate_holds({"gt": 256}, "lots") and not predicate_holds({"gte": 1}, True)
    assert predicate_holds({"absent": True}, None) and predicate_holds({"absent": False, "eq": 1}, 1)
    assert predicate_holds({"lt": 10, "lte": 10}, 9.5)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"id": "x", "severity": "block", "match": {}, "symptom": "s", "source": "s"}], "lacks fix"),
        (
            [{"id": "x", "severity": "fatal", "match": {}, "symptom": "s", "source": "s", "fix": "f"}],
            "severity",
        ),
        (
            [
                {
                    "id": "x",
                    "severity": "warn",
                    "match": {"archs": []},
                    "symptom": "s",
                    "source": "s",
                    "fix": "f",
                }
            ],
            "match may only hold",
        ),
        (
            [
                {
                    "id": "x",
                    "severity": "warn",
                    "match": {"settings": {"a": {"like": 1}}},
                    "symptom": "s",
                    "source": "s",
                    "fix": "f",
                }
            ],
            "predicate",
        ),
        (
            [
                {
                    "id": "x",
                    "severity": "warn",
                    "match": {"sglang_version": "~1"},
                    "symptom": "s",
                    "source": "s",
                    "fix": "f",
                }
            ],
            "version range",
        ),
        (
            [{"id": "x", "severity": "warn", "match": {}, "symptom": "s", "source": "s", "fix": "f"}] * 2,
            "duplicate id",
        ),
    ],
)
def test_validate_table_rejects(entries: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(SglangFlagError, match=message):
        validate_table({"entries": entries})


def _ids(settings: dict[str, Any], version: str, arch: str = "sm120") -> set[str]:
    return {f.id for f in match_known_bad(table(), settings, arch, version, RTX_PRO_6000_MIB)}


def test_the_old_fp4_advice_on_the_seed_profile_still_warns_about_the_moe_half() -> None:
    """Issue 39 item 1: the old entry's fix (fp4_gemm_backend flashinfer_cudnn) silenced its warning while the
    seed profile's MoE runner (flashinfer_cutlass, flashinfer 0.6.3) kept racing. Now it silences the GEMM
    half only, and the warning says the MoE half stays."""
    profile = resolve_profile(
        load_profiles(), "sm120", "seed", {"fp4_gemm_backend": "flashinfer_cudnn"}, lanes=load_lanes()
    )
    found = match_known_bad(
        table(), profile["settings"], "sm120", profile["sglang_version"], RTX_PRO_6000_MIB
    )
    ids = {f.id for f in found}
    assert "sm120-flashinfer-cutlass-fp4-moe-race" in ids
    assert "sm120-flashinfer-cutlass-fp4-gemm-race" not in ids
    _, warnings = guard(found, allow_known_bad=False)
    moe = next(w for w in warnings if "sm120-flashinfer-cutlass-fp4-moe-race" in w)
    assert "moe_runner_backend=flashinfer_cutlass" in moe and "pull/2913" in moe
    # As shipped, the seed profile warns about both halves; the current lane (flashinfer 0.7.2) about neither.
    seed = resolve_profile(load_profiles(), "sm120", "seed", lanes=load_lanes())["settings"]
    assert {"sm120-flashinfer-cutlass-fp4-gemm-race", "sm120-flashinfer-cutlass-fp4-moe-race"} <= _ids(
        seed, "0.5.9"
    )
    current = resolve_profile(load_profiles(), "sm120", "current", lanes=load_lanes())["settings"]
    assert not {i for i in _ids(current, "0.5.23") if "fp4" in i}


@pytest.mark.parametrize(
    ("version", "gemm", "moe"), [("0.5.9", True, True), ("0.5.10", False, True), ("0.5.11", False, False)]
)
def test_the_fp4_race_halves_follow_the_flashinfer_each_release_pins(
    version: str, gemm: bool, moe: bool
) -> None:
    """0.5.9 pins flashinfer 0.6.3 (no fix), 0.5.10 0.6.7.post2 (#2780, GEMM), 0.5.11 0.6.8.post1 (#2913,
    MoE)."""
    settings = {
        "quantization": "modelopt_fp4",
        "moe_runner_backend": "flashinfer_cutlass",
        "fp4_gemm_backend": "flashinfer_cutlass",
    }
    ids = _ids(settings, version)
    assert ("sm120-flashinfer-cutlass-fp4-gemm-race" in ids) is gemm
    assert ("sm120-flashinfer-cutlass-fp4-moe-race" in ids) is moe


@pytest.mark.parametrize(
    ("changes", "hit"),
    [
        # The model card's pair, sglang 0.5.9's own pick for an FP8 KV cache: the packed row, read as MLA.
        ({"dsa_prefill_backend": "flashmla_auto", "dsa_decode_backend": "flashmla_kv"}, True),
        # Backends the old entry (decode flashmla_* only) let through: the same packed layout.
        ({"dsa_prefill_backend": "flashmla_sparse", "dsa_decode_backend": "fa3"}, True),
        ({"dsa_prefill_backend": "flashmla_auto", "dsa_decode_backend": "tilelang"}, True),
        (
            {
                "dsa_prefill_backend": "flashmla_auto",
                "dsa_decode_backend": "flashmla_kv",
                "kv_cache_dtype": "auto",
            },
            True,
        ),
        # One trtllm backend is enough for the plain row: the old entry blocked this, the mechanism does not.
        ({"dsa_decode_backend": "flashmla_kv"}, False),
        # A bf16 KV cache stores the plain row (the community's route).
        (
            {
                "dsa_prefill_backend": "flashmla_auto",
                "dsa_decode_backend": "flashmla_kv",
                "kv_cache_dtype": "bf16",
            },
            False,
        ),
        # The DSA attention backend reads its own packed row.
        (
            {
                "dsa_prefill_backend": "flashmla_auto",
                "dsa_decode_backend": "flashmla_kv",
                "attention_backend": "dsa",
            },
            False,
        ),
    ],
)
def test_the_seed_nan_entry_matches_its_mechanism(changes: dict[str, Any], hit: bool) -> None:
    """Issue 39 item 3: sglang < 0.5.10, FP8/auto KV, attention not dsa/nsa, neither DSA backend trtllm."""
    settings = {**SEED_BACKENDS, **changes}
    assert ("sm120-dsa-decode-flashmla-nan" in _ids(settings, "0.5.9")) is hit
    assert "sm120-dsa-decode-flashmla-nan" not in _ids(settings, "0.5.23")


def test_trtllm_on_sm121_is_blocked_by_the_unsupported_arch_entry() -> None:
    """Issue 39 item 4: the SM121 entry (sourced to another model's report) is folded into the loud one."""
    ids = _ids({"dsa_decode_backend": "trtllm"}, "0.5.23", arch="sm121")
    assert "sm120-dsa-trtllm-unsupported-arch" in ids
    entry = next(e for e in table()["entries"] if e["id"] == "sm120-dsa-trtllm-unsupported-arch")
    assert "issues/40286" in entry["source"] and "Qwen3.8-Flash-Next" in entry["source"]


def test_every_entry_names_a_dated_or_versioned_source() -> None:
    """Each entry keeps its sources: a link, or the wheel file it was read from."""
    for entry in table()["entries"]:
        source = " ".join(str(entry["source"]).split())
        assert "https://" in source or "wheel sglang==" in source or "seed deployment" in source, entry["id"]
