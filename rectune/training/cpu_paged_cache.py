"""Continuous batching's paged cache on a CPU, sized to one GRPO step.

TRL sizes continuous batching's cache as a share of the device's memory (``max_memory_percent`` 0.5 of
what transformers finds). On a CPU transformers counts the machine's whole RAM less this process's (psutil),
not what is free, and the cache is zero-filled again at every step (TRL builds a new manager each step): on a
24 GiB machine the rollouts of 8 completions by a 2-layer SmolLM2 took the run to 10.8 GiB and 17 of its
step's 18 seconds, whatever else the machine was running. A step needs room for its own completions only
(docs/measured-figures.md, GRPO rollouts).
"""

from __future__ import annotations

from typing import Any

SIZING_KEYS = ("num_blocks", "max_memory_percent", "max_batch_tokens")  # a recipe setting one sizes it itself
BATCH_TOKENS = 1024  # tokens a forward: a longer prompt is prefilled in parts (transformers' scheduler splits it)


def pages_for_the_step(rows: int, longest_prompt: int, max_completion: int, page_size: int) -> int:
    """Pages (``num_blocks``) holding ``rows`` completions at once, each the longest prompt and a whole
    completion: ``rows × ⌈(longest_prompt + max_completion) / page_size⌉``."""
    return rows * -(-(longest_prompt + max_completion) // page_size)


def size_cache_to_the_step(config: Any, args: Any, longest_prompt: int | None) -> str | None:
    """Set ``config`` (TRL's ``ContinuousBatchingConfig``) to hold one generation's completions on this process
    (TRL's ``GRPOConfig`` ``args``: ``per_device_train_batch_size × steps_per_generation`` of
    ``max_completion_length``) in forwards of ``BATCH_TOKENS``, unless the recipe's
    ``transformers_continuous_batching_config`` sizes the cache itself or the longest prompt is unknown (a
    streamed set). Returns the line saying what was set, or None."""
    recipe = args.transformers_continuous_batching_config or {}
    if longest_prompt is None or any(key in recipe for key in SIZING_KEYS):
        return None
    rows, completion = args.per_device_train_batch_size * args.steps_per_generation, args.max_completion_length
    config.num_blocks = pages_for_the_step(rows, longest_prompt, completion, config.page_size)
    config.max_batch_tokens = BATCH_TOKENS
    return (
        f"continuous batching on a CPU: a paged cache of {config.num_blocks} pages of {config.page_size} tokens "
        f"({rows} completions at once, each the longest prompt's {longest_prompt} tokens and "
        f"max_completion_length {completion}), {BATCH_TOKENS} tokens a forward, not a share of the machine's "
        "memory; transformers_continuous_batching_config sets it"
    )
