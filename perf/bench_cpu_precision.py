"""A CPU run in bf16 against fp32: SFT tokens/s and GRPO prompts per minute, and how far the gradients move.

Without a GPU RecTune trains in fp32 unless the recipe or the command line asks for ``bf16: true`` and the CPU
has bfloat16 instructions (rectune/training/cpu_precision.py). This times both on the experiment's recipes
(``make data-experiment`` first), in one run, rounds interleaved, after one round that warms each up:

* SFT: ``train/sft.py recipes/smollm2_movie_experiment.yaml`` (without its validation) for ``--sft-steps``
  steps, once with ``--bf16 false`` and once with ``--bf16 true``; tokens/s of the median step after the
  first (from the ``step_time`` and ``num_tokens`` each step logs), and the last step's loss;
* GRPO: one step of ``--prompts`` prompts x 8 completions through RecTune's trainer
  (perf/bench_grpo_step.py's parts: rollouts, rewards, the loss's forward and backward) on the same prompts
  and seeds, each trainer sampling as it would in a run (in bf16 on a CPU: from a bfloat16 copy); then the
  bf16 trainer's loss and LoRA gradients on the fp32 trainer's completions, with the fp32 trainer's adapter
  weights, against the fp32 ones (cosine and relative difference).

    python -m perf.bench_cpu_precision [--prompts 8] [--rounds 2] [--sft-steps 6]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import yaml

from perf.bench_grpo_step import RECIPE as GRPO_RECIPE
from perf.bench_grpo_step import build_trainer, one_step
from rectune.training.cpu_precision import cpu_has_bfloat16

SFT_RECIPE = "recipes/smollm2_movie_experiment.yaml"
ROOT = Path(__file__).resolve().parent.parent


def sft_recipe(folder: Path) -> Path:
    """The experiment's SFT recipe without its validation (the bench times training steps only)."""
    recipe = yaml.safe_load((ROOT / SFT_RECIPE).read_text())
    for key in ("eval_strategy", "eval_steps", "load_best_model_at_end", "metric_for_best_model",
                "early_stopping_patience", "per_device_eval_batch_size"):  # fmt: skip
        recipe.pop(key, None)
    path = folder / "sft.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def sft_run(recipe: Path, bf16: bool, steps: int, out: Path) -> dict:
    """tokens/s of the median step after the first, and the last loss, of one SFT run."""
    flags = ["--bf16", str(bf16).lower(), "--max_steps", str(steps), "--output_dir", str(out), "--report_to", "none",
             "--save_steps", str(steps), "--logging_steps", "1"]  # fmt: skip
    subprocess.run([sys.executable, str(ROOT / "train/sft.py"), str(recipe), *flags], check=True, cwd=ROOT,
                   capture_output=True)  # fmt: skip
    state = json.loads((out / f"checkpoint-{steps}" / "trainer_state.json").read_text())
    logged = [entry for entry in state["log_history"] if "step_time" in entry]
    tokens = [b["num_tokens"] - a["num_tokens"] for a, b in zip(logged, logged[1:], strict=False)]
    rates = [new / entry["step_time"] for new, entry in zip(tokens, logged[1:], strict=True)]
    return {"tokens/s": statistics.median(rates), "loss": logged[-1]["loss"]}


def gradient_gap(fp32, bf16, rows: list[dict]) -> tuple[float, float]:
    """(cosine, |g16 - g32| / |g32|) of the bf16 trainer's LoRA gradients against the fp32 trainer's, on the fp32
    trainer's completions and adapter weights."""
    torch.manual_seed(0)
    inputs = fp32._generate_and_score_completions(rows)
    trained = {name: p for name, p in bf16.model.named_parameters() if p.requires_grad}
    with torch.no_grad():
        for name, p in fp32.model.named_parameters():
            if p.requires_grad:
                trained[name].copy_(p)
    grads = []
    for trainer in (fp32, bf16):
        with trainer.step_attention(trainer.model):
            trainer.compute_loss(trainer.model, inputs).backward()
        grads.append(torch.cat([p.grad.flatten().float() for p in trainer.model.parameters() if p.requires_grad]))
        trainer.model.zero_grad()
    g32, g16 = grads
    return torch.nn.functional.cosine_similarity(g32, g16, dim=0).item(), ((g16 - g32).norm() / g32.norm()).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="GRPO prompts a step (default 8, the recipe's)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sft-steps", type=int, default=6)
    args = parser.parse_args()
    if not cpu_has_bfloat16() or torch.cuda.is_available():
        sys.exit("bench_cpu_precision: needs a CPU with bfloat16 instructions and no GPU (elsewhere bf16 is as asked)")
    trainers = {"fp32": build_trainer(GRPO_RECIPE), "bf16": build_trainer(GRPO_RECIPE, ["--bf16", "true"])}
    # what each trainer samples from (bf16 on a CPU: a bfloat16 copy), which one_step sets again each step
    sampled_in = {name: str(t.rollout_dtype).removeprefix("torch.") if t.rollout_dtype else None
                  for name, t in trainers.items()}  # fmt: skip
    examples = list(trainers["fp32"].train_dataset.shuffle(seed=0).select(range(args.prompts)))
    rows = [example for example in examples for _ in range(trainers["fp32"].num_generations)]
    sft: dict[str, list[dict]] = {"fp32": [], "bf16": []}
    grpo: dict[str, list[dict]] = {"fp32": [], "bf16": []}
    with tempfile.TemporaryDirectory() as scratch:
        recipe = sft_recipe(Path(scratch))
        for round_ in range(-1, args.rounds):  # round 0 warms each up and is not counted
            for name, trainer in trainers.items():
                run = sft_run(recipe, name == "bf16", args.sft_steps, Path(scratch) / f"sft-{name}-{round_ + 1}")
                step = one_step(trainer, rows, True, True, True, True, sampled_in[name], seed=max(round_, 0))
                parts = ", ".join(f"{k} {v:.1f}" for k, v in step.items() if isinstance(v, float))
                print(f"round {round_ + 1} {name}: SFT {run['tokens/s']:.0f} tokens/s, GRPO {parts}", flush=True)
                if round_ >= 0:
                    sft[name].append(run)
                    grpo[name].append(step)
    cosine, gap = gradient_gap(trainers["fp32"], trainers["bf16"], rows)

    print("\n| precision | SFT tokens/s | SFT last loss | GRPO generate s | loss forward s | backward s | step s | "
          "prompts/min | vs fp32 |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    base = None
    for name in ("fp32", "bf16"):
        med = {k: statistics.median(step[k] for step in grpo[name]) for k in ("generate", "rewards", "other",
                                                                              "forward", "backward")}  # fmt: skip
        total = sum(med.values())
        per_minute = args.prompts * 60 / total
        rate = statistics.median(run["tokens/s"] for run in sft[name])
        base = base or (rate, per_minute)
        print(f"| {name} | {rate:.0f} ({rate / base[0]:.2f}x) | {sft[name][-1]['loss']:.4f} | {med['generate']:.1f} | "
              f"{med['forward']:.1f} | {med['backward']:.1f} | {total:.1f} | {per_minute:.2f} | "
              f"{per_minute / base[1]:.2f}x |")  # fmt: skip
    print(f"\nGRPO LoRA gradients in bf16 against fp32 on the same completions and weights: cosine {cosine:.4f}, "
          f"relative difference {gap:.3f}; {torch.get_num_threads()} threads, medians of {args.rounds} rounds "
          f"after one to warm up; SFT {args.sft_steps} steps a run, GRPO {args.prompts} prompts x 8")  # fmt: skip


if __name__ == "__main__":
    main()
