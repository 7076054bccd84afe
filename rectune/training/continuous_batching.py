"""Continuous batching's settings in GRPO: what a recipe's ``transformers_continuous_batching_config`` may hold,
and the paged cache RecTune sizes to the step on a CPU.

TRL passes the recipe's mapping to transformers' ``ContinuousBatchingConfig`` once the model has loaded and the
run holds its folder: an unknown key was a ``TypeError`` there, and a zero page size, a negative batch or a share
of memory past 1 tracebacks at the first step. :func:`check_continuous_batching_config` refuses them in one line
before anything loads.

TRL sizes the cache as a share of the device's memory (``max_memory_percent`` 0.5 of what transformers finds). On
a CPU transformers counts the machine's whole RAM less this process's (psutil), not what is free, and fills it
again at every step (TRL builds a new manager each step) with the cache and the attention masks over it (8,192
batch tokens by the cache's length, in the model's precision): on a 24 GiB machine the rollouts of 8
completions by a 2-layer SmolLM2 took the run to 10.8 GiB and 17 of its step's 18 seconds, whatever else the
machine was running. A step needs room for its own completions only (docs/measured-figures.md, GRPO rollouts).
"""

from __future__ import annotations

from typing import Any

from rectune.core.io import RecTuneError
from rectune.training.generation_kwargs import number_problem

KEY = "transformers_continuous_batching_config"
SIZING_KEYS = ("num_blocks", "max_memory_percent", "max_batch_tokens")  # a recipe setting one sizes it itself
BATCH_TOKENS = 1024  # tokens a forward: a longer prompt is prefilled in parts (transformers' scheduler splits it)

# key -> the interval its value must lie in
WHOLE = {
    "page_size": "[4, inf)", "num_blocks": "[1, inf)", "max_batch_tokens": "[1, inf)",
    "max_requests_per_batch": "[1, inf)", "max_blocks_per_request": "[0, inf)", "q_padding_interval_size": "[0, inf)",
    "kv_padding_interval_size": "[0, inf)", "default_compile_level": "[0, 3]", "max_queue_size": "[0, inf)",
    "seed": "[0, inf)",
}  # fmt: skip
NUMBERS = {
    "max_memory_percent": "(0, 1]", "safety_margin": "[0, 1]", "cpu_offload_space": "[0, inf)",
    "cpu_offload_space_safety_threshold": "(0, 1]", "cpu_group_timeout": "(0, inf)",
}  # fmt: skip
FLAGS = ("allow_block_sharing", "use_async_batching", "return_logprobs", "auto_switch_to_flash",
         "per_request_processors", "drop_unsupported_processors", "disable_nccl_graph_mixing")  # fmt: skip
SCHEDULERS = ("fifo", "prefill_first")  # transformers' SCHEDULER_MAPPING
NOT_FROM_A_RECIPE = {
    "varlen_compile_config": "a CompileConfig, which YAML cannot write: default_compile_level sets compiling",
    "decode_compile_config": "a CompileConfig, which YAML cannot write: default_compile_level sets compiling",
    "block_size": "deprecated in transformers: page_size",
    "use_default_compile_configs": "deprecated in transformers: default_compile_level",
    "max_cached_graphs": "deprecated in transformers, and no longer used",
}
CHOSEN_WHEN_NONE = frozenset({  # the settings whose None asks transformers to choose
    "num_blocks", "max_batch_tokens", "max_memory_percent", "max_requests_per_batch", "max_blocks_per_request",
    "use_async_batching", "use_cuda_graph", "safety_margin", "seed", "cpu_offload_space", "cpu_group_timeout",
    *NOT_FROM_A_RECIPE,
})  # fmt: skip


def continuous_batching_problem(settings: Any) -> str | None:
    """Why ``settings`` cannot be transformers' ``ContinuousBatchingConfig`` for GRPO's rollouts (None: they can)."""
    if settings is None:
        return None
    if not isinstance(settings, dict):
        return f"a {type(settings).__name__}, not a mapping of continuous batching's settings to values"
    for key, value in settings.items():
        if value is None and key in CHOSEN_WHEN_NONE:
            continue
        if key in NOT_FROM_A_RECIPE:
            return f"{key!r} takes {NOT_FROM_A_RECIPE[key]}"
        if key in WHOLE or key in NUMBERS:
            problem = number_problem(value, WHOLE.get(key) or NUMBERS[key], key in WHOLE)
        elif key in FLAGS:
            problem = None if isinstance(value, bool) else f"{value!r} is not true or false"
        elif key == "use_cuda_graph":
            pair = isinstance(value, list) and len(value) == 2 and all(isinstance(v, bool) for v in value)
            problem = None if isinstance(value, bool) or pair else f"{value!r} is not true, false or a pair of them"
        elif key == "scheduler_type":
            problem = None if value in SCHEDULERS else f"{value!r} is not one of {', '.join(SCHEDULERS)}"
        else:
            return f"{key!r} is not a setting of transformers' ContinuousBatchingConfig"
        if problem:
            return f"{key!r}: {problem}"
    return None


def check_continuous_batching_config(config: Any, source: object) -> None:
    """Stop in one line naming ``source`` (the recipe or the command line) when GRPO's continuous batching is on and
    its ``transformers_continuous_batching_config`` could not build transformers' config, before the run claims its
    folder."""
    if not getattr(config, "use_transformers_continuous_batching", False):
        return
    problem = continuous_batching_problem(getattr(config, KEY, None))
    if problem:
        raise RecTuneError(f"{source}: key {KEY!r}: {problem}")


def pages_for_the_step(rows: int, longest_prompt: int, max_completion: int, page_size: int) -> int:
    """Pages (``num_blocks``) holding ``rows`` completions at once, each the longest prompt and a whole
    completion: ``rows × ⌈(longest_prompt + max_completion) / page_size⌉``."""
    return rows * -(-(longest_prompt + max_completion) // page_size)


def cpu_cache(rows: int, longest_prompt: int, max_completion: int, page_size: int = 256) -> dict[str, int]:
    """The settings RecTune gives continuous batching on a CPU: ``num_blocks`` for ``rows`` completions at once
    (:func:`pages_for_the_step`) and forwards of ``BATCH_TOKENS``. 256: transformers' default page size."""
    return {"num_blocks": pages_for_the_step(rows, longest_prompt, max_completion, page_size),
            "max_batch_tokens": BATCH_TOKENS}  # fmt: skip


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
    for key, value in cpu_cache(rows, longest_prompt, completion, config.page_size).items():
        setattr(config, key, value)
    return (
        f"continuous batching on a CPU: a paged cache of {config.num_blocks} pages of {config.page_size} tokens "
        f"({rows} completions at once, each the longest prompt's {longest_prompt} tokens and "
        f"max_completion_length {completion}), {BATCH_TOKENS} tokens a forward, not a share of the machine's "
        "memory; transformers_continuous_batching_config sets it"
    )
