"""GRPO rollouts: generated tokens/s of TRL's sampling path against the faster ones.

The same prompts as a GRPO step generates for (``--prompts`` RecBench+ queries x ``--generations``
completions each, sampled at temperature 1, up to ``--max-new-tokens``), from the policy as a LoRA
GRPO run holds it (the recipes' adapter: r 16 on q, k, v, o, dropout 0.05, with non-zero weights):

* TRL's path: the PEFT model in train mode, the adapter beside each layer, one padded ``generate``;
* merged: the adapter merged into the base weights, eval mode (``merge_for_sampling``, RecTune's
  default, rectune/training/rollouts.py);
* merged, continuous batching: the same through ``generate_batch`` (TRL's
  ``use_transformers_continuous_batching``);
* merged at the shorter completion length a recipe may use.

Tokens are counted up to each sequence's end of answer. One run, one machine: the ratio to TRL's
path is the figure.

    python -m perf.bench_rollouts [--model embedded:smollm2] [--device cpu]
"""

import argparse
import time

import torch
from peft import LoraConfig, get_peft_model

from perf.bench_generation import QUERIES
from rectune.benchmarks.recbench.prompts import system_prompt
from rectune.models.checkpoints import load_for_generation, resolve_checkpoint
from rectune.training.rollouts import merged_for_sampling

# the CPU recipes' adapter
LORA = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])


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
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (experiment recipe: 8)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--short-max-new-tokens", type=int, default=48)
    args = parser.parse_args()

    torch.manual_seed(0)
    model, tokenizer = load_for_generation(resolve_checkpoint(args.model))
    policy = get_peft_model(model.to(args.device), LORA)
    for name, weight in policy.named_parameters():
        if "lora_B" in name:  # a trained adapter's B is not 0 (the merge then changes weights, as in training)
            torch.nn.init.normal_(weight, std=1e-3)
    prompts = prompt_ids(tokenizer, args.prompts)
    plain(policy, tokenizer, prompts[:1], 1, 4)  # warm-up
    long, short = args.max_new_tokens, args.short_max_new_tokens
    trl_path = f"TRL's path: LoRA beside the layers, train mode, {long} tokens"
    policy.train()
    results = {trl_path: plain(policy, tokenizer, prompts, args.generations, long)}
    with merged_for_sampling(policy):
        results[f"merged LoRA, eval mode, {long} tokens"] = plain(policy, tokenizer, prompts, args.generations, long)
        results[f"merged LoRA, eval mode, {short} tokens"] = plain(policy, tokenizer, prompts, args.generations, short)
        try:
            results[f"merged LoRA, continuous batching, {long} tokens"] = continuous(
                policy, prompts, args.generations, long
            )
        except Exception as err:  # report, do not hide: the path does not run on this device or version
            print(f"continuous batching failed here: {type(err).__name__}: {err}")
    base = results[trl_path]
    print(f"{args.prompts} prompts x {args.generations} completions, sampled, {args.device}, "
          f"{torch.get_num_threads()} threads")  # fmt: skip
    print("| rollout | generated tokens | seconds | tokens/s | vs TRL's path |\n|---|---|---|---|---|")
    for name, (tokens, seconds) in results.items():
        ratio = (tokens / seconds) / (base[0] / base[1])
        print(f"| {name} | {tokens} | {seconds:.1f} | {tokens / seconds:.1f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
