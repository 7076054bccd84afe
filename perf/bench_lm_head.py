"""SFT and GRPO steps on a CPU with TRL's fused output head as TRL ships it and as RecTune tunes it.

RecTune's tuning (rectune/training/cpu_lm_head.py) scores only the positions that have a label and
calls TRL's kernel on 256-token slices with 8,192-word tiles; TRL on a CPU scores every position in
4,096 x 32,768 tiles. Both give the same values (tests/training/test_cpu_lm_head.py). Steps, each
timed both ways on the same inputs and seeds:

* SFT: the CPU demo recipe (recipes/smollm2_movie_cpu.yaml: the embedded model, LoRA r 16 on q, k, v,
  o, fp32, packed 1,024-token sequences) on the demo's data (``make data-demo``), the forward and
  backward of one optimizer step's two packed sequences;
* GRPO: perf/bench_grpo_step.py's step of ``--prompts`` prompts x 8 completions, each group's prompt
  shared, on the experiment's data (``make data-experiment``).

Every step runs both ways once per round, rounds interleaved, after a round that warms each up and is
not counted; the table shows medians over rounds and the tuned head's speed-up.

    python -m perf.bench_lm_head [--prompts 8] [--rounds 2]
"""

import argparse
import statistics
import time
from itertools import islice

import torch

from perf.bench_grpo_step import build_trainer, one_step
from rectune.training.cpu_lm_head import tune_cpu_lm_head

SFT_RECIPE = "recipes/smollm2_movie_cpu.yaml"


def build_sft_trainer(recipe: str):
    from trl import DatasetMixtureConfig, ModelConfig, SFTConfig, SFTTrainer, get_peft_config

    from rectune.models.embedded import resolve_model_name
    from rectune.training.arguments import RunArguments
    from rectune.training.recipes import parse_recipe
    from rectune.training.views import load_examples

    types = (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments)
    overrides = ["--output_dir", "/tmp/rectune-bench-lm-head", "--report_to", "none"]
    args, model_args, mixture, _, _ = parse_recipe(types, [recipe, *overrides])
    dataset = load_examples(mixture, "sft", None, args.seed)
    trainer = SFTTrainer(
        model=resolve_model_name(model_args.model_name_or_path), args=args, train_dataset=dataset,
        peft_config=get_peft_config(model_args),
    )  # fmt: skip
    trainer.model.train()
    return trainer


def sft_step(trainer, batches: list[dict], seed: int, tuned_head: bool) -> dict:
    """Seconds of the forward and backward of ``batches`` (one optimizer step's micro-batches)."""
    tune_cpu_lm_head(tuned_head)
    torch.manual_seed(seed)  # LoRA's dropout draws the same masks both ways
    forward = backward = 0.0
    for batch in batches:
        start = time.perf_counter()
        loss = trainer.compute_loss(trainer.model, dict(batch))
        forward += time.perf_counter() - start
        start = time.perf_counter()
        loss.backward()
        backward += time.perf_counter() - start
    trainer.model.zero_grad()
    return {"forward": forward, "backward": backward}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="prompts a GRPO step (default 8)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    sft = build_sft_trainer(SFT_RECIPE)
    batches = list(islice(sft.get_train_dataloader(), sft.args.gradient_accumulation_steps))
    labelled = sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches)
    positions = sum(b["input_ids"].numel() - b["input_ids"].shape[0] for b in batches)
    grpo = build_trainer("recipes/smollm2_movie_experiment_grpo.yaml")
    examples = list(grpo.train_dataset.shuffle(seed=0).select(range(args.prompts)))
    rows = [example for example in examples for _ in range(grpo.num_generations)]

    steps = {
        "SFT": lambda seed, tuned: sft_step(sft, batches, seed, tuned_head=tuned),
        f"GRPO {args.prompts} x {grpo.num_generations}, shared": lambda seed, tuned: one_step(
            grpo, rows, True, None, seed, tuned_head=tuned
        ),
    }
    results: dict[tuple[str, bool], list[dict]] = {(name, tuned): [] for name in steps for tuned in (False, True)}
    for round_ in range(-1, args.rounds):  # round 0 warms every path up and is not counted
        for (name, tuned), runs in results.items():
            step = steps[name](max(round_, 0), tuned)
            step.pop("completions", None)
            print(f"round {round_ + 1} {name}, {'tuned' if tuned else 'TRL'} head: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in step.items()), flush=True)  # fmt: skip
            if round_ >= 0:
                runs.append(step)
    tune_cpu_lm_head(False)

    print("\n| step | head | loss forward s | backward s | step s | speed-up |\n|---|---|---|---|---|---|")
    for name in steps:
        totals = {}
        for tuned in (False, True):
            runs = results[name, tuned]
            med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
            totals[tuned] = sum(v for k, v in med.items() if k != "prefill")  # prefill is part of generate
            speed_up = f"{totals[False] / totals[True]:.2f}x" if tuned else ""
            print(f"| {name} | {'RecTune' if tuned else 'TRL'} | {med['forward']:.1f} | {med['backward']:.1f} | "
                  f"{totals[tuned]:.1f} | {speed_up} |")  # fmt: skip
    print(
        f"\nSFT: {labelled} of {positions} positions predict an answer token ({labelled / positions:.0%}); "
        f"{torch.get_num_threads()} threads, medians of {args.rounds} rounds after one to warm up"
    )


if __name__ == "__main__":
    main()
