"""Does GRPO learn here? GRPO from the base model on a reward it can learn, then the evidence.

    make learn-check                     # recipes/learn_check_grpo.yaml, about 12-16 minutes on 2 CPU cores
    python train/learn_check.py --max_steps 12 --out outputs/learn_check_short --data data/demo_movie
    python train/learn_check.py --learning_rate 1e-3     # any other flag goes to train/grpo.py

Trains with train/grpo.py (the same script and plumbing as any RFT run) on the demo data's RFT prompts,
rewarding answers close to 80 characters (rectune/training/learn_check.py says why), then prints the
training reward's mean over the first and last steps and the reward of held-out prompts' greedy answers,
base model against saved adapter. Exits 1 when that held-out rise is within noise.
"""

import subprocess
import sys
from pathlib import Path

from transformers.trainer_utils import get_last_checkpoint

from rectune.benchmarks import get_benchmark, load_rows
from rectune.core.cli import ArgumentParser, positive_int, run
from rectune.core.io import RecTuneError
from rectune.models.checkpoints import load_for_generation, resolve_checkpoint
from rectune.models.generation import GenerationSettings, generate
from rectune.training.learn_check import answer_length, clear_rise, paired_rise, reward_curve, rise

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes/learn_check_grpo.yaml"


def greedy_answers(model_name: str, prompts: list[list[dict]]) -> list[str]:
    model, tokenizer = load_for_generation(resolve_checkpoint(model_name))
    settings = GenerationSettings(batch_size=len(prompts), max_new_tokens=48)
    answers = [""] * len(prompts)
    for batch in generate(model, tokenizer, prompts, settings, desc=f"greedy answers of {model_name}"):
        for index, text, _ in batch:
            answers[index] = text
    return answers


def main() -> None:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="outputs/learn_check", help="folder for the run (its rft/ stage)")
    parser.add_argument("--max_steps", type=positive_int, default=None, help="GRPO steps (default: the recipe's)")
    parser.add_argument(
        "--data", default=str(ROOT / "data/demo_movie"), help="prepared RecBench+ folder (built by make data-demo)"
    )
    parser.add_argument("--window", type=positive_int, default=10, help="steps averaged at each end of the curve")
    parser.add_argument(
        "--prompts", type=positive_int, default=16, help="held-out prompts whose greedy answers are compared"
    )
    args, grpo_flags = parser.parse_known_args()

    # Data: the demo world's benchmark (built once), its held-out prompts for the greedy comparison.
    data = Path(args.data)
    if not (data / "train.jsonl").is_file() and data == ROOT / "data/demo_movie":
        subprocess.run(["make", "-s", "data-demo", f"PY={sys.executable}", "STAMP="], cwd=ROOT, check=True)
    rows = load_rows(data / "test.jsonl")[: args.prompts]
    prompts = [get_benchmark(row.benchmark).messages(row, {}) for row in rows]
    before = greedy_answers("embedded:smollm2", prompts)

    # GRPO as any RFT run trains, through the script users run.
    stage = Path(args.out) / "rft"
    steps = ["--max_steps", str(args.max_steps)] if args.max_steps else []
    command = [sys.executable, str(ROOT / "train/grpo.py"), str(RECIPE), "--output_dir", str(stage),
               "--train_data", str(data / "train_rft.jsonl"), *steps, *grpo_flags]  # fmt: skip
    if subprocess.run(command, cwd=ROOT).returncode != 0:
        raise RecTuneError(f"the GRPO run into {stage} failed (its output is above)")

    # The evidence: the reward over the run, and the saved adapter's greedy answers against the base's.
    # the Trainer checkpoints the last step (save_strategy: steps): its trainer_state holds the whole curve
    checkpoint = get_last_checkpoint(str(stage))
    if checkpoint is None:
        raise RecTuneError(f"the GRPO run into {stage} left no checkpoint to read its reward curve from")
    curve = reward_curve(Path(checkpoint) / "trainer_state.json")
    window = min(args.window, len(curve) // 2)
    first, last, error = rise(curve, window)
    after = greedy_answers(str(stage), prompts)
    changed = sum(a != b for a, b in zip(before, after, strict=True))
    base_reward, tuned_reward, paired_error = paired_rise(answer_length(before), answer_length(after))
    print(f"training reward, mean of the first {window} steps: {first:.3f}; of the last {window}: {last:.3f} "
          f"(rise {last - first:+.3f}, standard error {error:.3f}; {len(curve)} steps)")  # fmt: skip
    print(f"held-out greedy answers' reward: base {base_reward:.3f}, saved adapter {tuned_reward:.3f} "
          f"(rise {tuned_reward - base_reward:+.3f}, standard error {paired_error:.3f}; {len(prompts)} prompts, "
          f"{changed} answers changed)")  # fmt: skip
    for old, new in list(zip(before, after, strict=True))[:3]:
        print(f"  before: {old[:90]!r}\n  after:  {new[:90]!r}")
    if not clear_rise(base_reward, tuned_reward, paired_error):
        print("learn check FAILED: the held-out answers' reward did not rise beyond noise")
        sys.exit(1)
    print("learn check passed: the saved adapter's held-out answers earn more reward than the base model's")


if __name__ == "__main__":
    run(main)
