"""SFT throughput on the embedded model: padded vs packed (padding-free) batches, and FLOP/s utilisation.

Examples follow RecBench+ lengths: the paper's system prompt, a one- or two-sentence query and an
answer of 1-12 titles (ground-truth sizes), a third with a 20-title history in the prompt. Both modes
train one epoch over the same examples (padded: batches of 8 examples; packed: one 1024-token
sequence of whole examples per step); tokens/s counts real (non-pad) tokens.
Achieved FLOP/s uses 6 x parameters x tokens (forward + backward of a dense model; LoRA skips the
frozen weights' gradient, so this slightly overstates the work) over this machine's measured fp32
matmul FLOP/s.

    python -m perf.bench_training [--examples N]
"""

import argparse
import random
import tempfile
import time

import torch
from datasets import Dataset
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer

from perf.synthetic import make_titles
from rectune.benchmarks.recbench.prompts import system_prompt
from rectune.models.embedded import embedded_model_path


def matmul_flops(size: int = 1024, reps: int = 20) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.matmul(a, b)
    start = time.perf_counter()
    for _ in range(reps):
        torch.matmul(a, b)
    return 2 * size**3 * reps / (time.perf_counter() - start)


def examples(n: int, rng: random.Random) -> Dataset:
    titles = make_titles(2000, rng)
    rows = []
    for _ in range(n):
        query = f"I'm looking for {rng.choice(['tense', 'funny', 'quiet', 'epic'])} films like {rng.choice(titles)}."
        if rng.random() < 0.5:
            query += " Something my whole family could watch on a Sunday evening would be ideal."
        with_history = rng.random() < 1 / 3
        user = query
        if with_history:
            user = "Watched movies: " + "; ".join(rng.sample(titles, 20)) + "\nQuery: " + query
        answer = "\n".join(rng.sample(titles, rng.randint(1, 12)))
        rows.append(
            {
                "prompt": [
                    {"role": "system", "content": system_prompt("movie", with_history)},
                    {"role": "user", "content": user},
                ],
                "completion": [{"role": "assistant", "content": answer}],
            }
        )
    return Dataset.from_list(rows)


def train(dataset: Dataset, packing: bool, batch: int) -> tuple[float, int, int, int]:
    """One epoch: seconds, real tokens, token positions computed (real + padding), parameters."""
    with tempfile.TemporaryDirectory() as out:
        args = SFTConfig(
            output_dir=out,
            num_train_epochs=1,
            per_device_train_batch_size=1 if packing else batch,
            packing=packing,
            max_length=1024,
            report_to=[],
            bf16=False,
            use_cpu=True,
            save_strategy="no",
            activation_checkpointing=False,
            seed=0,
        )
        lora = LoraConfig(
            r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"
        )
        trainer = SFTTrainer(model=str(embedded_model_path()), args=args, train_dataset=dataset, peft_config=lora)
        real = sum(len(ids) for ids in trainer.train_dataset["input_ids"])
        positions = sum(b["input_ids"].numel() for b in trainer.get_train_dataloader())
        start = time.perf_counter()
        trainer.train()
        return time.perf_counter() - start, real, positions, sum(p.numel() for p in trainer.model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    dataset = examples(args.examples, random.Random(0))
    peak = matmul_flops()
    print(f"fp32 matmul (1024x1024, {torch.get_num_threads()} threads): {peak / 1e9:.1f} GFLOP/s")
    results = {}
    for packing in (False, True):
        seconds, real, positions, params = train(dataset, packing, args.batch)
        name = "packed (BFD, padding-free)" if packing else "padded"
        tokens_per_s = real / seconds
        achieved = 6 * params * tokens_per_s
        results[packing] = tokens_per_s
        print(
            f"{name:28s} {args.examples} examples: {seconds:6.1f} s, {real} real tokens in "
            f"{positions} positions ({real / positions:.0%} useful), {tokens_per_s:6.1f} tokens/s, "
            f"{achieved / 1e9:.2f} GFLOP/s = {achieved / peak:.1%} of measured matmul peak"
        )
    print(f"packed / padded tokens/s: {results[True] / results[False]:.2f}x")


if __name__ == "__main__":
    main()
