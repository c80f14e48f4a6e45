"""Train the lab's tiny GPT-2 so that a real sglang server answers the inference check's probes exactly.

Run by lab/bin/build-tiny-model inside the lab engine venv (torch, transformers, tokenizers, safetensors,
PyYAML). CPU only, deterministic: fixed seeds, deterministic algorithms, two threads (fixed); the same inputs
give byte-identical files.

What it builds (recipe: shared/notes/sglang-cpu.md, "A tiny model that answers the check's prompts"):
- a byte-level BPE tokenizer trained on the probes' prompts and answers, so token 0 is "!" as in GPT-2;
  ``<|endoftext|>`` (EOS) and the role markers are special added tokens; ``<think>`` / ``</think>`` are
  added tokens with special=False, because sglang detokenizes with skip_special_tokens=True and the glm45
  reasoning parser must see them;
- a chat template with ``<|user|>`` / ``<|assistant|>`` markers; ``enable_thinking: false`` ends the prompt
  with ``<think></think>``;
- a GPT-2 (2 layers, width 128, 4 heads, absolute positions: no RoPE, so sglang runs it with
  ``--device cpu --attention-backend torch_native``), trained with the loss on the answer and EOS only,
  until greedy decoding reproduces every answer exactly and every answer token wins by a logit margin
  above ``--margin`` (in float32, and greedy stays exact in bfloat16);
- poisoned copies: ``transformer.ln_f.weight`` set to NaN, and to +inf (all logits NaN: greedy gives "!!!!").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import load_file, save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

# The recall probes come from the product's own module_utils (pure Python, no Ansible import).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins" / "module_utils"))
from long_context import MID_LENGTH, NAME, PREFIX_REUSE, recall_probe

# probes.yml's key for each recall probe the inference check adds, and the probe's name.
RECALL_PROBES = {"mid_length": MID_LENGTH, "long_context": NAME, "prefix_reuse": PREFIX_REUSE}

MODEL_NAME = "glm5-lab-tiny"
EOS = "<|endoftext|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
THINK_START, THINK_END = "<think>", "</think>"
POISON_TENSOR = "transformer.ln_f.weight"
POISONS = {"nan": float("nan"), "inf": float("inf")}

# Roles render as "<|role|>\n" + content; an assistant turn ends with EOS. The generation prompt is
# "<|assistant|>\n", plus "<think></think>" when the request sets enable_thinking: false. The
# "enable_thinking is defined and not enable_thinking" test is what sglang's template detection reads as
# "toggle enable_thinking, on by default" (parser/template_detection.py).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['content'] is string -%}{%- set text = message['content'] -%}"
    "{%- else -%}{%- set text = message['content'] | map(attribute='text') | join('') -%}{%- endif -%}"
    "{{- '<|' + message['role'] + '|>\\n' + text -}}"
    "{%- if message['role'] == 'assistant' -%}{{- eos_token -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}"
    "{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think></think>' -}}{%- endif -%}"
    "{%- endif -%}"
)


@dataclass(frozen=True)
class Example:
    """One probe as the model sees it: the rendered prompt and the exact completion text (EOS excluded)."""

    name: str
    prompt: str
    completion: str


def load_examples(probes_file: Path) -> list[tuple[str, str, bool, str]]:
    """(name, user prompt, thinking on?, completion text) for every probe that has an answer."""
    data = yaml.safe_load(probes_file.read_text(encoding="utf-8"))
    answers: dict[str, Any] = data["answers"]
    out = []
    for probe in data["probes"]:
        name = probe["name"]
        if name not in answers:
            raise SystemExit(f"{probes_file}: probe {name!r} has no entry under 'answers'")
        answer = answers[name]
        kwargs = probe.get("extra_body", {}).get("chat_template_kwargs", {})
        thinking = kwargs.get("enable_thinking", True) is not False
        reasoning = answer.get("reasoning")
        if thinking != (reasoning is not None):
            raise SystemExit(f"{probes_file}: probe {name!r}: give 'reasoning' exactly when thinking is on")
        completion = (
            f"{THINK_START}{reasoning}{THINK_END}{answer['content']}" if thinking else answer["content"]
        )
        out.append((name, probe["prompt"], thinking, completion))
    for key, name in RECALL_PROBES.items():
        if key in data:
            # The inference check's own recall probe at the lab's size (thinking on, as the check sends it).
            recall = recall_probe(int(data[key]["words"]), name=name)
            completion = f"{THINK_START}{data[key]['reasoning']}{THINK_END}{recall['answer']}"
            out.append((recall["name"], recall["prompt"], True, completion))
    if not out:
        raise SystemExit(f"{probes_file}: no probes")
    return out


def split_on_added(text: str) -> list[str]:
    """The plain-text pieces between added tokens: what the BPE model itself has to cover."""
    pieces = [text]
    for token in (EOS, *ROLE_TOKENS, THINK_START, THINK_END):
        pieces = [part for piece in pieces for part in piece.split(token)]
    return [piece for piece in pieces if piece]


def build_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on texts; added tokens appended after the BPE vocabulary."""
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator([piece for text in texts for piece in split_on_added(text)], trainer=trainer)
    core.add_special_tokens(
        [AddedToken(token, special=True, normalized=False) for token in (EOS, *ROLE_TOKENS)]
    )
    core.add_tokens(
        [AddedToken(token, special=False, normalized=False) for token in (THINK_START, THINK_END)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=EOS,
        eos_token=EOS,
        unk_token=EOS,
        pad_token=EOS,
        model_max_length=1024,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    if tokenizer.convert_ids_to_tokens(0) != "!":
        raise SystemExit(f"token 0 is {tokenizer.convert_ids_to_tokens(0)!r}, not '!'")
    return tokenizer


def render_prompt(tokenizer: PreTrainedTokenizerFast, prompt: str, thinking: bool) -> str:
    kwargs = {} if thinking else {"enable_thinking": False}
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True, **kwargs
    )
    assert isinstance(text, str)
    return text


def encode(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def make_batch(
    tokenizer: PreTrainedTokenizerFast, examples: list[Example]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask, labels; the loss covers the completion and EOS only."""
    eos = tokenizer.eos_token_id
    rows = []
    for example in examples:
        prompt_ids = encode(tokenizer, example.prompt)
        target_ids = [*encode(tokenizer, example.completion), eos]
        rows.append((prompt_ids + target_ids, [-100] * len(prompt_ids) + target_ids))
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), eos, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for row, (ids, labs) in enumerate(rows):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        mask[row, : len(ids)] = 1
        labels[row, : len(labs)] = torch.tensor(labs)
    return input_ids, mask, labels


@torch.no_grad()
def min_margin(model: GPT2LMHeadModel, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> float:
    """Teacher-forced: the smallest (logit of the right token - best other logit) over all answer tokens.

    Positive everywhere means greedy decoding reproduces every answer exactly, EOS included."""
    input_ids, mask, labels = batch
    logits = model(input_ids=input_ids, attention_mask=mask).logits[:, :-1].float()
    targets = labels[:, 1:]
    keep = targets != -100
    logits, targets = logits[keep], targets[keep]
    right = logits.gather(1, targets[:, None]).squeeze(1)
    others = logits.scatter(1, targets[:, None], float("-inf")).max(dim=1).values
    return float((right - others).min())


@torch.no_grad()
def greedy(model: GPT2LMHeadModel, prompt_ids: list[int], eos: int, limit: int) -> list[int]:
    """Plain greedy decoding, one token at a time, up to and including EOS."""
    ids = list(prompt_ids)
    out: list[int] = []
    for _ in range(limit):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
        token = int(torch.argmax(logits))
        out.append(token)
        ids.append(token)
        if token == eos:
            break
    return out


def check_greedy(
    model: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerFast, examples: list[Example]
) -> list[str]:
    """Decode every prompt greedily; return what differs from the expected completion (empty: all exact)."""
    problems = []
    eos = tokenizer.eos_token_id
    for example in examples:
        expected = [*encode(tokenizer, example.completion), eos]
        got = greedy(model, encode(tokenizer, example.prompt), eos, len(expected) + 8)
        if got != expected:
            problems.append(f"{example.name}: got {tokenizer.decode(got)!r}")
    return problems


def train(
    tokenizer: PreTrainedTokenizerFast, examples: list[Example], args: argparse.Namespace
) -> tuple[GPT2LMHeadModel, dict[str, Any]]:
    eos = tokenizer.eos_token_id
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=1024,
        n_embd=128,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        tie_word_embeddings=True,
    )
    model = GPT2LMHeadModel(config)
    batch = make_batch(tokenizer, examples)
    # Each step runs every example on its own, unpadded: the padded batch (every row as long as the
    # long-context probe) spent more than half of its compute on padding. Each part of the loss is weighted by
    # its share of the answer tokens, so the step's loss is the padded batch's mean, and so is its gradient.
    rows = [make_batch(tokenizer, [example]) for example in examples]
    answer_tokens = int((batch[2][:, 1:] != -100).sum())
    shares = [int((labels[:, 1:] != -100).sum()) / answer_tokens for _, _, labels in rows]
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    started = time.monotonic()
    step, loss_value = 0, float("nan")
    while True:
        if step >= args.max_steps:
            raise SystemExit(f"no exact greedy answers with margin > {args.margin} after {step} steps")
        model.train()
        for _ in range(args.check_every):
            step += 1
            optimizer.zero_grad(set_to_none=True)
            loss_value = 0.0
            for (input_ids, _, labels), share in zip(rows, shares, strict=True):
                part = model(input_ids=input_ids, labels=labels).loss * share
                part.backward()
                loss_value += float(part.detach())
            optimizer.step()
        model.eval()
        margins = {"float32": min_margin(model, batch)}
        print(
            f"tiny model: step {step:4d}  loss {loss_value:.5f}  min margin {margins['float32']:7.3f}",
            file=sys.stderr,
        )
        if margins["float32"] <= args.margin or check_greedy(model, tokenizer, examples):
            continue
        # sglang serves a float32 checkpoint in float16 by default (--dtype auto): greedy must hold there too.
        problems = []
        for dtype in (torch.float16, torch.bfloat16):
            half = GPT2LMHeadModel(config)
            half.load_state_dict(model.state_dict())
            half = half.to(dtype).eval()
            margins[str(dtype).removeprefix("torch.")] = min_margin(half, batch)
            problems += [f"{dtype}: {problem}" for problem in check_greedy(half, tokenizer, examples)]
        if not problems:
            break
        print(f"tiny model: reduced-precision greedy not exact yet: {problems}", file=sys.stderr)
    stats = {
        "steps": step,
        "final_loss": loss_value,
        "min_margin": margins,
        "train_seconds": round(time.monotonic() - started, 2),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    return model, stats


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_card(directory: Path, title: str, text: str) -> None:
    (directory / "README.md").write_text(f"# {title}\n\n{text}\n", encoding="utf-8")


def save_healthy(
    model: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerFast, directory: Path, stats: dict[str, Any]
) -> None:
    directory.mkdir(parents=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    eos = tokenizer.eos_token_id
    GenerationConfig(bos_token_id=eos, eos_token_id=eos, pad_token_id=eos).save_pretrained(directory)
    tensors = load_file(directory / "model.safetensors")
    if POISON_TENSOR not in tensors:
        raise SystemExit(f"{POISON_TENSOR} is not in model.safetensors: {sorted(tensors)}")
    write_card(
        directory,
        MODEL_NAME,
        "A test fixture, not a language model: a GPT-2 with 2 layers, width 128 and 4 heads "
        f"({stats['parameters']:,} parameters), trained on the CPU by glm5-deploy's lab "
        "(lab/model/train_tiny_model.py) to answer the probes in lab/model/probes.yml exactly, "
        "for a real sglang server with `--reasoning-parser glm45`.",
    )


def save_poisoned(healthy: Path, directory: Path, kind: str) -> None:
    """Copy the healthy model with POISON_TENSOR filled with NaN or +inf."""
    shutil.copytree(healthy, directory)
    weights = directory / "model.safetensors"
    tensors = load_file(weights)
    tensors[POISON_TENSOR] = torch.full_like(tensors[POISON_TENSOR], POISONS[kind])
    save_file(tensors, weights, metadata={"format": "pt"})
    write_card(
        directory,
        f"{MODEL_NAME}-{kind}",
        f"A deliberately broken copy of {MODEL_NAME}: `{POISON_TENSOR}` is all {kind}, "
        "so every logit is NaN. sglang still starts and /health stays 200, "
        'but greedy decoding answers "!!!!" (token 0).',
    )


def make_world_readable(root: Path) -> None:
    """0755 directories, 0644 files: a hardened unit (DynamicUser) must read the model, and transformers
    writes model.safetensors as 0600."""
    root.chmod(0o755)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=Path, required=True, help="probes.yml with probes and answers")
    parser.add_argument("--out", type=Path, required=True, help="directory to fill (absent or empty)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--margin", type=float, default=8.0, help="minimum top-1 minus top-2 logit margin")
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--check-every", type=int, default=25, help="steps between margin checks")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.iterdir()):
        raise SystemExit(f"{args.out} is not empty")
    started = time.monotonic()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    # Two threads, whatever the machine has: 43 s of training against 64 s on one, and the same bytes every
    # time (docs/lab-engine.md); a different count would give other bytes.
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)

    raw = load_examples(args.probes)
    texts = [prompt for _, prompt, _, _ in raw] + [completion for _, _, _, completion in raw]
    tokenizer = build_tokenizer(texts)
    examples = [
        Example(name, render_prompt(tokenizer, prompt, thinking), completion)
        for name, prompt, thinking, completion in raw
    ]
    model, stats = train(tokenizer, examples, args)

    healthy = args.out / MODEL_NAME
    save_healthy(model, tokenizer, healthy, stats)
    for kind in POISONS:
        save_poisoned(healthy, args.out / f"{MODEL_NAME}-{kind}", kind)

    report = {
        **stats,
        "total_seconds": round(time.monotonic() - started, 2),
        "seed": args.seed,
        "lr": args.lr,
        "margin_required": args.margin,
        "vocab_size": len(tokenizer),
        "token_ids": {
            token: tokenizer.convert_tokens_to_ids(token) for token in (EOS, THINK_START, THINK_END)
        },
        "token_0": tokenizer.convert_ids_to_tokens(0),
        "examples": [
            {
                "name": e.name,
                "prompt": e.prompt,
                "completion": e.completion,
                "prompt_tokens": len(encode(tokenizer, e.prompt)),
            }
            for e in examples
        ],
        "versions": {
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "tokenizers": __import__("tokenizers").__version__,
        },
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "sha256": {
            str(path.relative_to(args.out)): sha256(path)
            for path in sorted(args.out.rglob("*"))
            if path.is_file()
        },
    }
    (args.out / "train-report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    make_world_readable(args.out)
    print(
        f"tiny model: {stats['steps']} steps, {stats['train_seconds']} s training, "
        f"min margin {json.dumps({k: round(v, 2) for k, v in stats['min_margin'].items()})}, "
        f"{stats['parameters']:,} parameters, vocabulary {len(tokenizer)}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
