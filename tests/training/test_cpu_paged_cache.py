"""Continuous batching's paged cache on a CPU holds one GRPO generation's completions, not a share of RAM."""

from types import SimpleNamespace

from transformers.generation import ContinuousBatchingConfig

from rectune.training.cpu_paged_cache import BATCH_TOKENS, pages_for_the_step, size_cache_to_the_step


def grpo_args(**recipe_settings) -> SimpleNamespace:
    """What the sizing reads of TRL's GRPOConfig: 2 prompts x 8 completions a step, 96 new tokens each."""
    return SimpleNamespace(per_device_train_batch_size=16, steps_per_generation=1, max_completion_length=96,
                           transformers_continuous_batching_config=recipe_settings or None)  # fmt: skip


def test_each_completion_gets_the_pages_of_the_longest_prompt_and_a_whole_completion():
    assert pages_for_the_step(16, 400, 96, 256) == 32  # 496 tokens: 2 pages each
    assert pages_for_the_step(16, 416, 96, 256) == 32  # 512: exactly 2
    assert pages_for_the_step(16, 417, 96, 256) == 48  # 513: a third page
    assert pages_for_the_step(8, 909, 8, 256) == 32  # 917: 4 pages each


def test_trls_config_is_sized_to_the_step_unless_the_recipe_sized_it():
    config = ContinuousBatchingConfig(max_memory_percent=0.5)  # as TRL builds it from an empty recipe setting
    args = grpo_args()
    args.steps_per_generation = 2  # two optimizer steps' completions generated at once
    said = size_cache_to_the_step(config, args, 400)
    assert (config.num_blocks, config.max_batch_tokens) == (64, BATCH_TOKENS)  # 32 completions x 2 pages
    assert said.startswith("continuous batching on a CPU: a paged cache of 64 pages of 256 tokens (32 completions")
    for key, value in (("num_blocks", 10), ("max_memory_percent", 0.1), ("max_batch_tokens", 512)):
        config = ContinuousBatchingConfig(**{"max_memory_percent": 0.5, key: value})
        assert size_cache_to_the_step(config, grpo_args(**{key: value}), 400) is None
        assert getattr(config, key) == value and (config.num_blocks is None or key == "num_blocks")
    unread = ContinuousBatchingConfig(max_memory_percent=0.5)  # a streamed set: no longest prompt to size by
    assert size_cache_to_the_step(unread, grpo_args(), None) is None and unread.num_blocks is None
