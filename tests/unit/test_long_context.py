"""The long-context probe: a passphrase planted in the middle of generated filler, asked for at the end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.glm5.deploy.plugins.module_utils.judge_probes import (
    DEFAULT_PROBES,
    normalize_probes,
)
from ansible_collections.glm5.deploy.plugins.module_utils.long_context import (
    GPU_MID_LENGTH_WORDS,
    GPU_PREFIX_REUSE_WORDS,
    GPU_WORDS,
    MID_LENGTH,
    NAME,
    PREFIX_REUSE,
    LongContextError,
    long_context_probe,
    recall_probe,
    with_recall_probes,
)
from hypothesis import given
from hypothesis import strategies as st

# DeepSeek Sparse Attention's top-k (GLM-5's index_topk): the sparse selection only runs past it.
DSA_TOPK = 2048


@given(st.integers(min_value=50, max_value=3000))
def test_the_probe_is_deterministic_and_plants_its_passphrase_in_the_middle(words: int) -> None:
    probe = long_context_probe(words)
    assert probe == long_context_probe(words)
    text, question = probe["prompt"].split("\n\n")
    assert question == "What is the passphrase written above? Answer with the word only."
    fact = f"The passphrase is {probe['answer']}."
    assert text.count(fact) == 1 and text.count("passphrase") == 1
    before, after = text.split(fact)
    assert abs(len(before.split()) - len(after.split())) <= 12, "the fact is not in the middle"
    assert words <= len(text.split()) <= words + 12


@given(st.integers(min_value=50, max_value=2000))
def test_expect_takes_the_passphrase_alone_and_nothing_else(words: int) -> None:
    probe = long_context_probe(words)
    secret = probe["answer"]
    for right in (secret, f" {secret}.", f"**{secret}**"):
        assert re.search(probe["expect"], right), right
    for wrong in ("4", f"The passphrase is {secret}", f"{secret} {secret}", "!!!!", ""):
        assert not re.search(probe["expect"], wrong), wrong


def test_the_gpu_size_is_past_the_sparse_top_k() -> None:
    """4500 words of filler: every word is at least one token, so the prompt is past DSA's top-k of 2048 even
    before the tokenizer splits numbers and punctuation (about 6000 tokens with GLM-5's)."""
    prompt = long_context_probe(GPU_WORDS)["prompt"]
    assert len(re.findall(r"\w+|[^\w\s]", prompt)) > 2 * DSA_TOPK


@pytest.mark.parametrize("words", [0, 49, -5, True, 300.0, "300"])
def test_an_unusable_size_is_refused(words: object) -> None:
    with pytest.raises(LongContextError, match="long_context_words must be a whole number of 50 or more"):
        long_context_probe(words)  # type: ignore[arg-type]


def test_with_long_context_adds_a_probe_the_module_accepts() -> None:
    probes = with_recall_probes([dict(item) for item in DEFAULT_PROBES], long_context_words=300)
    assert [probe["name"] for probe in probes] == [*(item["name"] for item in DEFAULT_PROBES), NAME]
    assert "answer" not in probes[-1]
    normalized = normalize_probes(probes)
    assert normalized[-1].name == NAME and normalized[-1].expect == long_context_probe(300)["expect"]
    assert with_recall_probes(list(DEFAULT_PROBES), long_context_words=0) == list(DEFAULT_PROBES)


def test_a_probe_already_called_long_context_is_refused() -> None:
    with pytest.raises(LongContextError, match="already called 'long-context'"):
        with_recall_probes([{"name": NAME, "prompt": "x"}], long_context_words=300)


def test_the_recall_probes_differ_by_name_and_keep_the_long_context_prompt() -> None:
    """Issue 39 item 4: the mid-length and prefix-reuse prompts are their own (so the first prefix-reuse
    request is not already cached by the long-context one); the long-context prompt for a size is
    unchanged."""
    assert recall_probe(300) == long_context_probe(300)
    prompts = {name: recall_probe(300, name=name)["prompt"] for name in (NAME, MID_LENGTH, PREFIX_REUSE)}
    assert len(set(prompts.values())) == 3
    mid = recall_probe(GPU_MID_LENGTH_WORDS, name=MID_LENGTH)["prompt"]
    # 65 to 2048 tokens at about 1.3 tokens a word.
    assert 65 < 1.3 * len(mid.split()) < 2048
    reuse = recall_probe(GPU_PREFIX_REUSE_WORDS, name=PREFIX_REUSE)["prompt"]
    assert 1.3 * len(reuse.split()) > 2048


def test_with_recall_probes_orders_them_and_refuses_a_taken_name() -> None:
    probes = with_recall_probes(list(DEFAULT_PROBES), 300, 100, 200)
    assert [p["name"] for p in probes[-3:]] == [MID_LENGTH, NAME, PREFIX_REUSE]
    assert all("answer" not in p for p in probes)
    assert with_recall_probes(list(DEFAULT_PROBES)) == list(DEFAULT_PROBES)
    with pytest.raises(LongContextError, match="set mid_length_words to 0"):
        with_recall_probes([{"name": MID_LENGTH, "prompt": "x"}], mid_length_words=100)


def test_the_validate_roles_gpu_defaults_are_these_sizes() -> None:
    """sglang_validate's defaults are the GPU sizes this module documents, not a second set of numbers."""
    defaults = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "roles/sglang_validate/defaults/main.yml").read_text()
    )
    assert (
        defaults["sglang_validate_long_context_words"],
        defaults["sglang_validate_mid_length_words"],
        defaults["sglang_validate_prefix_reuse_words"],
    ) == (GPU_WORDS, GPU_MID_LENGTH_WORDS, GPU_PREFIX_REUSE_WORDS)
