"""The recall probes: a question over generated filler whose answer is one fact planted in its middle.

Three sizes, three code paths that short prompts never reach (docs/hardware-validation.md):

- **long-context** (``long_context_words``): past DeepSeek Sparse Attention's top-k. GLM-5's DSA lets each
  query attend to the top 2048 keys only (index_topk in the model's config), so a prompt shorter than that
  never runs the sparse selection: both seed probes are. Sent once.
- **mid-length** (``mid_length_words``): between the short probes and the long one (65 to 2048 tokens on a
  GPU). A prefill of more than 64 rows takes another kernel path than the short probes' (sglang PR #39288:
  past 64 rows a page-split scratch gathered NaN on SM120). Sent like the short probes, ``concurrency`` times.
- **prefix-reuse** (``prefix_reuse_words``): the same long prompt sent twice, one after the other, so that the
  second is served from the radix cache's copy of the first one's prefix (on a server that was checked before,
  the first may be served from the cache too; the follow-up always is). The follow-up is judged like the
  first answer and must agree with it: "first request correct, follow-ups that reuse the cached prefix
  garbage" is a bug family of its own (sglang PRs #18904 and #24198: FP8 KV scales dropped on that path).

Each prompt plants its fact in the middle of ``words`` words of filler and asks for it at the end, so the
answer depends on attention reaching far back. Pure and deterministic: the same name and ``words`` give the
same prompt and answer wherever it is built, on the controller, in the module, and for a test model trained to
answer it.
"""

from __future__ import annotations

import random
from typing import Any

NAME = "long-context"
MID_LENGTH = "mid-length"
PREFIX_REUSE = "prefix-reuse"
# The option that sizes each recall probe, by the probe's name.
OPTIONS = {
    NAME: "long_context_words",
    MID_LENGTH: "mid_length_words",
    PREFIX_REUSE: "prefix_reuse_words",
}
# About 1.3 tokens per filler word with GLM-5's tokenizer: 4500 words is about 6000 tokens, three times the
# sparse attention's top-k of 2048, and well inside GLM-5's context.
GPU_WORDS = 4500
# The GPU defaults (roles/sglang_validate/defaults/main.yml restates them; a unit test holds them equal). The
# other two: about 800 tokens, past 64 rows and well short of the top-k; about 2600
# tokens, past the top-k, so that the follow-up's sparse selection reads the cached prefix.
GPU_MID_LENGTH_WORDS = 600
GPU_PREFIX_REUSE_WORDS = 2000
# The fewest words that still make a prompt several times longer than the other probes (about 65 tokens).
MIN_WORDS = 50
QUESTION = "What is the passphrase written above? Answer with the word only."

_PLACES = ("shelf", "drawer", "crate", "locker", "cabinet", "basket", "chest", "rack")
_COLOURS = ("red", "blue", "green", "grey", "white", "black", "amber", "violet")
_THINGS = ("spoons", "bolts", "candles", "ribbons", "marbles", "pencils", "buttons", "keys")
_SECRETS = ("heliotrope", "quartzite", "marigold", "obsidian", "juniper", "tamarind", "cobalt", "saffron")


class LongContextError(ValueError):
    """An unusable size for a recall probe."""


def recall_probe(words: int, max_tokens: int = 256, name: str = NAME) -> dict[str, Any]:
    """The recall probe ``name`` (name, prompt, expect, max_tokens, and ``answer``: the passphrase) over about
    ``words`` words of filler, the passphrase sentence at the middle. Deterministic in ``name`` and ``words``;
    the long-context probe keeps the prompt it always had for a size."""
    option = OPTIONS.get(name, "words")
    if isinstance(words, bool) or not isinstance(words, int) or words < MIN_WORDS:
        raise LongContextError(f"{option} must be a whole number of {MIN_WORDS} or more, not {words!r}")
    rng = random.Random(words if name == NAME else f"{name}:{words}")
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
        "name": name,
        "prompt": prompt,
        "expect": rf"^\W*{secret}\W*$",
        "max_tokens": max_tokens,
        "answer": secret,
    }


def long_context_probe(words: int, max_tokens: int = 256) -> dict[str, Any]:
    """The long-context probe over about ``words`` words (:func:`recall_probe`)."""
    return recall_probe(words, max_tokens, NAME)


def with_recall_probes(
    probes: list[Any],
    long_context_words: int = 0,
    mid_length_words: int = 0,
    prefix_reuse_words: int = 0,
    max_tokens: int = 256,
) -> list[Any]:
    """``probes`` plus the mid-length, long-context and prefix-reuse probes at these sizes (0: not that one),
    in that order; their ``answer`` key is the trainer's, not the module's. A probe of ``probes`` already
    called like one of them is refused."""
    out = list(probes)
    sizes = ((MID_LENGTH, mid_length_words), (NAME, long_context_words), (PREFIX_REUSE, prefix_reuse_words))
    for name, words in sizes:
        if words == 0:
            continue
        probe = recall_probe(words, max_tokens, name)
        probe.pop("answer")
        if any(isinstance(item, dict) and item.get("name") == name for item in probes):
            raise LongContextError(
                f"a probe is already called {name!r}; rename it or set {OPTIONS[name]} to 0"
            )
        out.append(probe)
    return out
