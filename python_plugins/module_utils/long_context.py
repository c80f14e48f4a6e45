"""The long-context probe: a recall question over generated filler, past DeepSeek Sparse Attention's top-k.

GLM-5's DSA lets each query attend to the top 2048 keys only (index_topk in the model's config), so a prompt
shorter than that never runs the sparse selection: both seed probes are. Public NaN and corruption reports for
DSA models come from long prompts (docs/hardware-validation.md). This probe plants one fact in the middle of
``words`` words of filler and asks for it at the end, so the answer depends on attention reaching far back.

Pure and deterministic: the same ``words`` gives the same prompt and answer wherever it is built, on the
controller, in the module, and for a test model trained to answer it.
"""

from __future__ import annotations

import random
from typing import Any

NAME = "long-context"
# About 1.3 tokens per filler word with GLM-5's tokenizer: 4500 words is about 6000 tokens, three times the
# sparse attention's top-k of 2048, and well inside GLM-5's context.
GPU_WORDS = 4500
# The fewest words that still make a prompt several times longer than the other probes.
MIN_WORDS = 50
QUESTION = "What is the passphrase written above? Answer with the word only."

_PLACES = ("shelf", "drawer", "crate", "locker", "cabinet", "basket", "chest", "rack")
_COLOURS = ("red", "blue", "green", "grey", "white", "black", "amber", "violet")
_THINGS = ("spoons", "bolts", "candles", "ribbons", "marbles", "pencils", "buttons", "keys")
_SECRETS = ("heliotrope", "quartzite", "marigold", "obsidian", "juniper", "tamarind", "cobalt", "saffron")


class LongContextError(ValueError):
    """An unusable size for the long-context probe."""


def long_context_probe(words: int, max_tokens: int = 256) -> dict[str, Any]:
    """The probe (name, prompt, expect, max_tokens, and ``answer``: the passphrase) over about ``words``
    words of filler, the passphrase sentence at the middle. Deterministic in ``words``."""
    if isinstance(words, bool) or not isinstance(words, int) or words < MIN_WORDS:
        raise LongContextError(
            f"long_context_words must be a whole number of {MIN_WORDS} or more, not {words!r}"
        )
    rng = random.Random(words)
    secret = rng.choice(_SECRETS)
    sentences: list[str] = []
    count = 0
    number = 1
    while count < words:
        sentence = (
            f"The {rng.choice(_PLACES)} number {number} holds {rng.randint(2, 99)} "
            f"{rng.choice(_COLOURS)} {rng.choice(_THINGS)}."
        )
        sentences.append(sentence)
        count += len(sentence.split())
        number += 1
    sentences.insert(len(sentences) // 2, f"The passphrase is {secret}.")
    prompt = " ".join(sentences) + "\n\n" + QUESTION
    return {
        "name": NAME,
        "prompt": prompt,
        "expect": rf"^\W*{secret}\W*$",
        "max_tokens": max_tokens,
        "answer": secret,
    }


def with_long_context(probes: list[Any], words: int, max_tokens: int = 256) -> list[Any]:
    """``probes`` plus the long-context probe of ``words`` words (0: no long-context probe); its ``answer``
    key is the trainer's, not the module's."""
    if words == 0:
        return list(probes)
    probe = long_context_probe(words, max_tokens)
    probe.pop("answer")
    if any(isinstance(item, dict) and item.get("name") == NAME for item in probes):
        raise LongContextError(
            f"a probe is already called {NAME!r}; rename it or set long_context_words to 0"
        )
    return [*probes, probe]
