"""GRPO rollouts: generated tokens/s of plain ``generate`` against transformers' continuous batching.

The same prompts as a GRPO step generates for (``--prompts`` RecBench+ queries x ``--generations``
completions each, sampled at temperature 1, up to ``--max-new-tokens``), once padded into one batch with
``model.generate`` (TRL's default path) and once through ``model.generate_batch`` (continuous batching,
TRL's ``use_transformers_continuous_batching``); also plain ``generate`` at the shorter completion
length the recipe may use. Tokens are counted up to each sequence's end of answer. One run, one
machine: the ratio is the figure.

    python -m perf.bench_rollouts [--model embedded:smollm2] [--device cpu]
"""

import argparse
import time

import torch

from perf.bench_generation import QUERIES
from rectune.benchmarks.recbench.prompts import system_prompt
from rectune.models.checkpoints import load_for_generation, resolve_checkpoint


def prompt_ids(tokenizer, count: int) -> list[list[int]]:
    prompts = []
    for query in (QUERIES * (count // len(QUERIES) + 1))[:count]:
        messages = [{"role": "system", "content": system_prompt("movie")}, {"role": "user", "content": query}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return prompts


def generated_length(tokens: list[int], eos: int, pad: int) -> int:
    """Tokens a completion really has: up to and including its end of answer, padding left out."""
    for position, token in enumerate(tokens):
        if token in (eos, pad):
            return position + 1
    return len(tokens)


def plain(model, tokenizer, prompts: list[list[int]], generations: int, max_new_tokens: int) -> tuple[int, float]:
    """(generated tokens, seconds) of one left-padded ``generate`` call over every completion."""
    rows = [ids for ids in prompts for _ in range(generations)]
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in rows], device=model.device)
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in rows], device=model.device)
    start = time.perf_counter()
    with torch.no_grad():
        output = model.generate(
            input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0
        )
    seconds = time.perf_counter() - start
    completions = output[:, width:].tolist()
    return sum(generated_length(c, tokenizer.eos_token_id, pad) for c in completions), seconds


def continuous(model, prompts: list[list[int]], generations: int, max_new_tokens: int) -> tuple[int, float]:
    """(generated tokens, seconds) of ``generate_batch`` (continuous batching) over the same completions."""
    from transformers import GenerationConfig

    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=1.0,
        eos_token_id=model.generation_config.eos_token_id,
        pad_token_id=model.generation_config.pad_token_id,
    )
    rows = [ids for ids in prompts for _ in range(generations)]
    start = time.perf_counter()
    with torch.no_grad():
        outputs = model.generate_batch(rows, generation_config=config, progress_bar=False)
    seconds = time.perf_counter() - start
    return sum(len(output.generated_tokens) for output in outputs.values()), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:smollm2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step (CPU recipe: 2)")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt (CPU recipe: 4)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--short-max-new-tokens", type=int, default=48)
    args = parser.parse_args()

    torch.manual_seed(0)
    model, tokenizer = load_for_generation(resolve_checkpoint(args.model))
    model.to(args.device)
    prompts = prompt_ids(tokenizer, args.prompts)
    plain(model, tokenizer, prompts[:1], 1, 4)  # warm-up
    results = {
        f"generate, {args.max_new_tokens} tokens": plain(
            model, tokenizer, prompts, args.generations, args.max_new_tokens
        ),
        f"generate, {args.short_max_new_tokens} tokens": plain(
            model, tokenizer, prompts, args.generations, args.short_max_new_tokens
        ),
    }
    try:
        results[f"continuous batching, {args.max_new_tokens} tokens"] = continuous(
            model, prompts, args.generations, args.max_new_tokens
        )
    except Exception as err:  # report, do not hide: the path does not run on this device or version
        print(f"continuous batching failed here: {type(err).__name__}: {err}")
    base = results[f"generate, {args.max_new_tokens} tokens"]
    print(f"{args.prompts} prompts x {args.generations} completions, sampled, {args.device}, "
          f"{torch.get_num_threads()} threads")  # fmt: skip
    print("| rollout | generated tokens | seconds | tokens/s | vs generate |\n|---|---|---|---|---|")
    for name, (tokens, seconds) in results.items():
        ratio = (tokens / seconds) / (base[0] / base[1])
        print(f"| {name} | {tokens} | {seconds:.1f} | {tokens / seconds:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
