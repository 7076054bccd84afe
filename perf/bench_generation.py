"""Queries per second of batched generation against one query at a time, embedded model, CPU.

Target: batched at least 3x faster. Same 16 RecBench+-style prompts, greedy, up to
48 new tokens each, batch size 16 (sorted by length, left padded) against batch size 1.

    python -m perf.bench_generation
"""

import time

import torch

from rectune.benchmarks.recbench.prompts import system_prompt
from rectune.models.checkpoints import load_for_generation, resolve_checkpoint
from rectune.models.embedded import EMBEDDED
from rectune.models.generation import GenerationSettings, generate

QUERIES = [
    "I'm in the mood for a tense thriller with Robert De Niro in it.",
    "Any Martin Scorsese films for a movie night?",
    "Recommend animated films the whole family can watch.",
    "What else did the person who directed The Usual Suspects make?",
    "I loved Alien; more science fiction horror please.",
    "Romantic comedies from the nineties?",
    "Films scored by John Williams that are not Star Wars.",
    "A war film about submarines.",
    "Something like Pulp Fiction but less violent.",
    "Classic film noir from the 1940s.",
    "Movies starring Meryl Streep in a dramatic role.",
    "Heist movies with a clever twist ending.",
    "I want a Christopher Nolan film I may not have seen.",
    "Westerns directed by Sergio Leone.",
    "Coming-of-age stories set in high school.",
    "Musicals with memorable songs for a rainy afternoon.",
]


def run(model, tokenizer, prompts, batch_size: int) -> float:
    settings = GenerationSettings(batch_size=batch_size, max_new_tokens=48)
    start = time.perf_counter()
    done = sum(len(batch) for batch in generate(model, tokenizer, prompts, settings, desc=f"batch {batch_size}"))
    assert done == len(prompts)
    return time.perf_counter() - start


def main() -> None:
    torch.manual_seed(0)
    model, tokenizer = load_for_generation(resolve_checkpoint(EMBEDDED))
    prompts = [[{"role": "system", "content": system_prompt("movie")}, {"role": "user", "content": q}] for q in QUERIES]
    run(model, tokenizer, prompts[:2], 2)  # warm-up
    alone = run(model, tokenizer, prompts, 1)
    batched = run(model, tokenizer, prompts, 16)
    n = len(prompts)
    print(f"{n} queries, greedy, max 48 new tokens, {torch.get_num_threads()} threads")
    print(f"one at a time: {alone:6.1f} s  {n / alone:.2f} queries/s")
    print(f"batch of 16:   {batched:6.1f} s  {n / batched:.2f} queries/s")
    print(f"speed-up: {alone / batched:.1f}x (target >= 3x: {'met' if alone / batched >= 3 else 'MISSED'})")


if __name__ == "__main__":
    main()
