"""GRPO rollouts: generated tokens/s of TRL's sampling path against the faster ones.

The same prompts as a GRPO step generates for (``--prompts`` RecBench+ queries x ``--generations``
completions each, sampled at temperature 1, up to ``--max-new-tokens``), from the policy as a LoRA
GRPO run holds it (the CPU GRPO recipes' adapter: r 16 on q, k, v, o, no dropout, non-zero weights):

* TRL's path: the PEFT model in train mode, the adapter beside each layer, one padded ``generate``
  drawing tokens with ``torch.multinomial``, with LoRA dropout 0.05 and without (the CPU GRPO recipes
  set none);
* merged: the adapter merged into the base weights, eval mode, with transformers' draw and with the
  inverse-CDF draw (``merge_for_sampling``, RecTune's default: rectune/training/rollouts.py, inverse_cdf.py);
* merged, sampled from a bfloat16 copy refreshed from the policy (``rollout_dtype: bfloat16``, the CPU
  GRPO recipes' setting), at two completion lengths (``--max-new-tokens``, ``--short-max-new-tokens``); the KL
  divergence of the copy's next-token distribution from the policy's is printed below the table;
* merged, continuous batching: ``generate_batch`` (TRL's ``use_transformers_continuous_batching``), as TRL
  sets it up and with its cache and batches sized to the step (:func:`sized_to_the_step`). On a CPU, where
  TRL's share of memory is a share of the machine's whole RAM, the first is RecTune's CPU cache instead
  (rectune/training/continuous_batching.py: each completion the pages of the longest prompt and the completion).

Every path samples with TRL's generation settings (temperature 1, no top-k or top-p) and is timed with
its merge, unmerge and refresh. Tokens are counted up to each sequence's end of answer. Every path runs
once per round, the rounds interleaved, and the table sums them. One run, one machine: the ratio to the
first row (TRL's path with the adapter's usual dropout) is the figure.

    python -m perf.bench_rollouts [--model embedded:smollm2] [--device cpu]
"""

import argparse
import contextlib
import copy
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import GenerationConfig

from perf.bench_generation import QUERIES
from rectune.benchmarks.recbench.prompts import system_prompt
from rectune.models.checkpoints import load_for_generation, resolve_checkpoint
from rectune.training.continuous_batching import cpu_cache
from rectune.training.rollouts import RolloutCopy, generating_with, merged_for_sampling

# the CPU GRPO recipes' adapter
LORA = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])


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
    tokens, seconds, _ = sampled(model, tokenizer, prompts, generations, max_new_tokens)
    return tokens, seconds


def sampled(model, tokenizer, prompts, generations: int, max_new_tokens: int) -> tuple[int, float, torch.Tensor]:
    """:func:`plain`'s figures and the sampled sequences (prompt and completion, left-padded)."""
    rows = [ids for ids in prompts for _ in range(generations)]
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in rows], device=model.device)
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in rows], device=model.device)
    start = time.perf_counter()
    with torch.no_grad():
        output = model.generate(
            input_ids=input_ids, attention_mask=mask, generation_config=trl_sampling(model, max_new_tokens)
        )
    seconds = time.perf_counter() - start
    completions = output[:, width:].tolist()
    return sum(generated_length(c, tokenizer.eos_token_id, pad) for c in completions), seconds, output


@torch.no_grad()
def mean_kl(policy, copy, sequences: torch.Tensor, pad: int) -> float:
    """Mean KL(policy ‖ copy) of the next-token distributions over the non-pad positions of ``sequences``."""
    mask = (sequences != pad).long()
    policy_logp = policy(input_ids=sequences, attention_mask=mask).logits.float().log_softmax(-1)
    copy_logp = copy(input_ids=sequences, attention_mask=mask).logits.float().log_softmax(-1)
    per_position = (policy_logp.exp() * (policy_logp - copy_logp)).sum(-1)
    return (per_position * mask).sum().item() / mask.sum().item()


def trl_sampling(model, max_new_tokens: int) -> GenerationConfig:
    """The sampling configuration TRL's GRPO trainer passes to ``generate`` (its defaults)."""
    defaults = model.generation_config
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                            pad_token_id=defaults.pad_token_id, eos_token_id=defaults.eos_token_id)  # fmt: skip


def sized_to_the_step(completions: int) -> dict:
    """Continuous batching's settings for one GRPO step's rollouts, instead of those TRL leaves to transformers
    (a paged cache of half the device's free memory, zero-filled at every step's new manager; up to 8,192
    tokens a batch; CUDA graphs captured again each step): 4 blocks of 256 tokens a completion, 1,024-token
    batches, no CUDA graphs. The ``transformers_continuous_batching_config`` a recipe can set."""
    return {"num_blocks": 4 * completions, "max_batch_tokens": 1024, "use_cuda_graph": False}


def continuous(
    model, prompts: list[list[int]], generations: int, max_new_tokens: int, settings: dict | None = None
) -> tuple[int, float]:
    """(generated tokens, seconds) of ``generate_batch`` (continuous batching) over the same completions, with
    TRL's settings (its 0.5 share of free memory for the cache) updated by ``settings``."""
    from transformers.generation import ContinuousBatchingConfig

    config = trl_sampling(model, max_new_tokens)
    batching = ContinuousBatchingConfig(**{"max_memory_percent": 0.5, **(settings or {})})
    rows = [ids for ids in prompts for _ in range(generations)]
    start = time.perf_counter()
    with torch.no_grad():
        outputs = model.generate_batch(
            rows, generation_config=config, continuous_batching_config=batching, progress_bar=False
        )
    seconds = time.perf_counter() - start
    return sum(len(output.generated_tokens) for output in outputs.values()), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:smollm2")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step (CPU recipe: 2)")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (experiment recipe: 8)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="completion length (as measured: 64)")
    parser.add_argument("--short-max-new-tokens", type=int, default=48, help="a shorter one to compare (measured: 48)")
    parser.add_argument("--rounds", type=int, default=3, help="each path runs once per round, interleaved")
    args = parser.parse_args()

    torch.manual_seed(0)
    model, tokenizer = load_for_generation(resolve_checkpoint(args.model))
    policy = get_peft_model(model.to(args.device), LORA)
    for name, weight in policy.named_parameters():
        if "lora_B" in name:  # a trained adapter's B is not 0 (the merge then changes weights, as in training)
            torch.nn.init.normal_(weight, std=1e-3)
    with_dropout = copy.deepcopy(policy)  # the same adapter with PEFT's usual dropout, as GRPO recipes often set
    for layer in with_dropout.modules():
        if isinstance(getattr(layer, "lora_dropout", None), torch.nn.ModuleDict):
            layer.lora_dropout["default"] = torch.nn.Dropout(0.05)
    with merged_for_sampling(policy):
        rollout = RolloutCopy(policy, torch.bfloat16)  # built once per run, as the trainer does
    prompts = prompt_ids(tokenizer, args.prompts)
    long, short = args.max_new_tokens, args.short_max_new_tokens
    sized = sized_to_the_step(args.prompts * args.generations)
    first, first_cache = None, "as TRL sets it up"  # TRL's share of the device's memory
    if args.device == "cpu":  # on a CPU a share of the machine's whole RAM, which RecTune's trainer replaces
        first = cpu_cache(args.prompts * args.generations, max(map(len, prompts)), long)
        first_cache = "with RecTune's CPU cache"

    def trl_path(model):
        model.train()
        return plain(model, tokenizer, prompts, args.generations, long)

    def merged(max_new_tokens, copy=None, inverse_cdf=True, generate=plain):
        start = time.perf_counter()  # merging, unmerging and the copy's refresh are part of every step's cost
        with merged_for_sampling(policy):
            if copy is not None:
                copy.sync()
            sampler = policy if copy is None else copy.model
            with generating_with(policy, sampler) if inverse_cdf else contextlib.nullcontext():
                tokens, *_ = generate(policy, tokenizer, prompts, args.generations, max_new_tokens)
        return tokens, time.perf_counter() - start

    paths = {
        f"TRL's path: LoRA beside the layers, dropout 0.05, train mode, {long} tokens": lambda: trl_path(with_dropout),
        f"TRL's path: LoRA beside the layers, no dropout, train mode, {long} tokens": lambda: trl_path(policy),
        f"merged LoRA, eval mode, transformers' draw, {long} tokens": lambda: merged(long, inverse_cdf=False),
        f"merged LoRA, eval mode, inverse-CDF draw (`merge_for_sampling`), {long} tokens": lambda: merged(long),
        f"merged LoRA, bfloat16 copy (`rollout_dtype`), inverse-CDF draw, {long} tokens": lambda: merged(long, rollout),
        f"merged LoRA, bfloat16 copy, inverse-CDF draw, {short} tokens": lambda: merged(short, rollout),
        f"merged LoRA, continuous batching {first_cache}, {long} tokens": lambda: merged(
            long, inverse_cdf=False, generate=lambda model, _tokenizer, *rest: continuous(model, *rest, settings=first)
        ),
        f"merged LoRA, continuous batching sized to the step, {long} tokens": lambda: merged(
            long, inverse_cdf=False, generate=lambda model, _tokenizer, *rest: continuous(model, *rest, settings=sized)
        ),
    }
    for model_to_warm in (with_dropout, policy, rollout.model):  # first calls pick kernels: not timed
        plain(model_to_warm, tokenizer, prompts[:1], 1, 4)
    totals = {name: [0, 0.0] for name in paths}
    for round_ in range(args.rounds):  # interleaved, so drifts of the machine hit every path alike
        for name, run in list(paths.items()):
            torch.manual_seed(round_)
            try:
                tokens, seconds = run()
            except Exception as err:  # report, do not hide: the path does not run on this device or version
                print(f"{name} failed here: {type(err).__name__}: {err}")
                del paths[name], totals[name]
                continue
            totals[name][0] += tokens
            totals[name][1] += seconds
    base_tokens, base_seconds = next(iter(totals.values()))
    print(f"{args.prompts} prompts x {args.generations} completions, sampled, {args.rounds} rounds, "
          f"{args.device}, {torch.get_num_threads()} threads")  # fmt: skip
    print("| rollout | generated tokens | seconds | tokens/s | vs the first row |\n|---|---|---|---|---|")
    for name, (tokens, seconds) in totals.items():
        ratio = (tokens / seconds) / (base_tokens / base_seconds)
        print(f"| {name} | {tokens} | {seconds:.1f} | {tokens / seconds:.1f} | {ratio:.2f}x |")
    with merged_for_sampling(policy):
        rollout.sync()
        with generating_with(policy, rollout.model):
            sequences = sampled(policy, tokenizer, prompts, args.generations, long)[2]
        kl = mean_kl(policy, rollout.model, sequences, tokenizer.pad_token_id)
    print(f"bfloat16 copy: mean KL(policy || copy) of the next token over its completions: {kl:.4f} nats")


if __name__ == "__main__":
    main()
