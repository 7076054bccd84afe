"""GRPO prompts per minute: each group's prompt encoded once (``shared_prefix``) against once per completion.

The experiment's GRPO recipe (recipes/smollm2_movie_experiment_grpo.yaml: the embedded model, LoRA r 16
on q, k, v, o, 20-candidate prompts of about 400 tokens, 8 completions of up to 96 tokens, DAPO, no
reference model) on its own training prompts (``make data-experiment`` first), through RecTune's
trainer. Each configuration runs a step's parts on the same prompts:

* rollouts: the prompts' completions sampled from the merged policy with the same seed, so both paths
  draw the same numbers; the table counts the completions that came out identical, as TRL takes them and
  as RecTune does, and with finished rows computed to the end and not;
* rewards: the recipe's rewards over those completions;
* loss: the DAPO loss's forward and backward over the same completions (the shared path's loss and
  LoRA gradients are checked against the unshared path's in tests/training/test_shared_prefix.py), with
  the packed groups' attention in parts (rectune/training/prefix_attention.py) or under one mask, held
  over the backward as a training step holds it; ``--checkpointing`` turns on activation checkpointing
  (the recipe has it off; the GPU recipes have it on), so the backward recomputes each layer.

Rows: the step as TRL takes it (2 prompts x 8, nothing shared, TRL's output head), the same batch as
RecTune's trainer takes it (shared, the output head tuned for CPUs: rectune/training/cpu_lm_head.py),
and ``--prompts`` prompts x 8 as RecTune takes them: with each prompt's keys and values copied into its
rows' caches after the shared prefill (as before rectune/training/prefix_decoding.py); kept once while
decoding, every row computed until the last ends (as before rectune/models/finished_rows.py); with the
loss's attention under the packed mask (as before rectune/training/prefix_attention.py); all of these
(the default); and so with bfloat16 rollouts (``rollout_dtype``).
Every row runs once per round, rounds interleaved, after a round that warms each up and is not counted;
the table shows medians over rounds and prompts per minute, and the ratio to the first row. The
optimizer's update (well under a second on LoRA's parameters) is left out of every row alike.

    python -m perf.bench_grpo_step [--prompts 8] [--rounds 2] [--checkpointing]
"""

import argparse
import statistics
import time

import torch

from rectune.training.arguments import RftArguments, RunArguments
from rectune.training.cpu_lm_head import tune_cpu_lm_head
from rectune.training.cpu_precision import cpu_has_bfloat16
from rectune.training.model_init_kwargs import set_model_init
from rectune.training.recipes import parse_recipe
from rectune.training.rewards import resolve_rewards, rft_resources
from rectune.training.shaped_trainer import ShapedGRPOTrainer
from rectune.training.shaping import ShapingArguments
from rectune.training.views import data_files, load_examples

RECIPE = "recipes/smollm2_movie_experiment_grpo.yaml"


def build_trainer(recipe: str, flags: list[str] | None = None, checkpointing: bool = False) -> ShapedGRPOTrainer:
    """RecTune's GRPO trainer for ``recipe`` with command-line ``flags`` (``["--bf16", "true"]``)."""
    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, get_peft_config

    from rectune.models.embedded import resolve_model_name

    types = (GRPOConfig, ModelConfig, DatasetMixtureConfig, RunArguments, RftArguments, ShapingArguments)
    overrides = ["--output_dir", "/tmp/rectune-bench-grpo-step", "--report_to", "none", *(flags or [])]
    overrides += ["--activation_checkpointing", "true"] if checkpointing else []
    args, model_args, mixture, run_args, rft_args, shaping, _ = parse_recipe(types, [recipe, *overrides])
    dataset = load_examples(mixture, "rft", None, args.seed)
    benchmark, resources = rft_resources(data_files(mixture)[0])
    rewards, _ = resolve_rewards(benchmark, rft_args.reward_funcs, resources)
    set_model_init(args, model_args)  # the precision's dtype, as train/grpo.py loads the policy
    trainer = ShapedGRPOTrainer(
        model=resolve_model_name(model_args.model_name_or_path), reward_funcs=rewards, args=args,
        train_dataset=dataset, peft_config=get_peft_config(model_args), shaping=shaping, benchmark=benchmark,
        resources=resources,
    )  # fmt: skip
    if checkpointing:  # as transformers' Trainer.train turns it on: non-reentrant, every layer
        trainer.model.activation_checkpointing_enable()
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def one_step(
    trainer: ShapedGRPOTrainer,
    rows: list[dict],
    shared: bool,
    cascade: bool,
    skip_finished: bool,
    in_parts: bool,
    rollout_dtype: str | None,
    seed: int,
) -> dict:
    """Seconds of each part of a step on ``rows`` (each prompt repeated per completion), and its completions;
    ``shared``: each group's prompt encoded once, with RecTune's output head for CPUs; ``cascade``: and kept
    once while decoding; ``skip_finished``: finished rows no longer computed; ``in_parts``: the packed
    loss's attention in parts."""
    trainer.shared_prefix = trainer.shared_prefix_rollouts = tuned_head = shared
    trainer.shared_prefix_decoding = cascade
    trainer.skip_finished_rows = skip_finished
    trainer.prefix_attention_in_parts = in_parts
    tune_cpu_lm_head(tuned_head)
    trainer.rollout_dtype = getattr(torch, rollout_dtype) if rollout_dtype else None
    trainer.step_seconds.clear()
    trainer._training_batch = True
    torch.manual_seed(seed)
    start = time.perf_counter()
    inputs = trainer._generate_and_score_completions(rows)
    prepared = time.perf_counter() - start
    with trainer.step_attention(trainer.model):  # as a training step holds it, over the backward too
        start = time.perf_counter()
        loss = trainer.compute_loss(trainer.model, inputs)
        forward = time.perf_counter() - start
        start = time.perf_counter()
        loss.backward()
        backward = time.perf_counter() - start
    # the loss's value cannot tell the paths apart (one iteration: every ratio is exactly 1); its gradients can
    grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.requires_grad])
    trainer.model.zero_grad()
    seconds = dict(trainer.step_seconds)
    return {
        "generate": seconds["generate"], "prefill": seconds.get("prefill", 0.0), "rewards": seconds["rewards"],
        "other": prepared - seconds["generate"] - seconds["rewards"], "forward": forward, "backward": backward,
        "completions": inputs["completion_ids"].tolist(), "grads": grads,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default=RECIPE)
    parser.add_argument("--prompts", type=int, default=8, help="prompts a step in the last row (default 8)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--checkpointing", action="store_true", help="the loss under activation checkpointing, as the GPU recipes"
    )
    args = parser.parse_args()
    trainer = build_trainer(args.recipe, checkpointing=args.checkpointing)
    generations = trainer.num_generations
    examples = list(trainer.train_dataset.shuffle(seed=0).select(range(args.prompts)))
    rows = {n: [example for example in examples[:n] for _ in range(generations)] for n in (2, args.prompts)}
    n = args.prompts
    configs = [("2 x 8, as TRL", 2, False, False, False, False, None),
               ("2 x 8, RecTune", 2, True, True, True, True, None),
               (f"{n} x 8, RecTune, prompt copied per row", n, True, False, False, True, None),
               (f"{n} x 8, RecTune, finished rows decoded to the end", n, True, True, False, True, None),
               (f"{n} x 8, RecTune, attention under the packed mask", n, True, True, True, False, None),
               (f"{n} x 8, RecTune", n, True, True, True, True, None),
               (f"{n} x 8, RecTune, bfloat16 rollouts", n, True, True, True, True, "bfloat16")]  # fmt: skip
    # the trainer ignores rollout_dtype on such a CPU: the row would time an emulation nobody runs
    if trainer.accelerator.device.type == "cpu" and not cpu_has_bfloat16():
        print("no bfloat16 row: this CPU has no bfloat16 instructions")
        configs.pop()
    results: list[list[dict]] = [[] for _ in configs]  # by row: with --prompts 2 two rows share a name
    for round_ in range(-1, args.rounds):  # round 0 warms every path up (first calls allocate) and is not counted
        for row, (name, prompts, shared, cascade, skip_finished, in_parts, dtype) in enumerate(configs):
            step = one_step(
                trainer, rows[prompts], shared, cascade, skip_finished, in_parts, dtype, seed=max(round_, 0)
            )
            parts = ", ".join(f"{k} {v:.1f}" for k, v in step.items() if k not in ("completions", "grads"))
            print(f"round {round_ + 1} {name}: {parts}")
            if round_ >= 0:
                results[row].append(step)
    masked, in_parts = results[4], results[5]
    grad_gap = max(
        ((a["grads"] - b["grads"]).abs().max() / a["grads"].abs().max()).item()
        for a, b in zip(masked, in_parts, strict=True)
    )

    def identical(first: int, second: int) -> int:
        return sum(a == b for r in range(args.rounds) for a, b in zip(
            results[first][r]["completions"], results[second][r]["completions"], strict=True))  # fmt: skip

    print("\n| rows | generate s (prefill) | rewards s | other s | loss forward s | backward s | step s | "
          "prompts/min | vs TRL |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    base = None
    for (name, prompts, *_), steps in zip(configs, results, strict=True):
        timed = [k for k in steps[0] if k not in ("completions", "grads")]
        med = {k: statistics.median(step[k] for step in steps) for k in timed}
        total = sum(v for k, v in med.items() if k != "prefill")
        per_minute = prompts * 60 / total
        base = base or per_minute
        print(f"| {name} | {med['generate']:.1f} ({med['prefill']:.1f}) | {med['rewards']:.2f} | {med['other']:.1f} | "
              f"{med['forward']:.1f} | {med['backward']:.1f} | {total:.1f} | {per_minute:.2f} | "
              f"{per_minute / base:.2f}x |")  # fmt: skip
    print(
        f"\nidentical completions on the same seed: shared vs unshared rollouts "
        f"{identical(0, 1)} of {args.rounds * 2 * generations}, finished rows skipped vs "
        f"computed {identical(3, 5)} of {args.rounds * n * generations}; the LoRA gradients "
        f"with the attention in parts and under the mask differed by at most {grad_gap:.1e} of the largest (same "
        f"completions: "
        f"{identical(4, 5)} of {args.rounds * n * generations}); "
        f"{torch.get_num_threads()} threads, medians of {args.rounds} rounds after one to warm up"
        f"{', activation checkpointing on' if args.checkpointing else ''}"
    )


if __name__ == "__main__":
    main()
