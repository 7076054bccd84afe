"""Continuous batching in GRPO: a recipe's settings that could not build transformers' config are one line
before the run claims its folder, and on a CPU the paged cache holds one generation's completions, not a share
of the machine's RAM."""

import dataclasses
from types import SimpleNamespace

import pytest
from conftest import one_step_grpo_recipe, run_script
from transformers.generation import ContinuousBatchingConfig

from rectune.core.io import RecTuneError
from rectune.training import continuous_batching as rules
from rectune.training.continuous_batching import (
    BATCH_TOKENS,
    check_continuous_batching_config,
    continuous_batching_problem,
    pages_for_the_step,
    size_cache_to_the_step,
)


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


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"page_size": 0}, "'page_size': 0 must lie in [4, inf)"),  # a ZeroDivisionError at the first step
        ({"max_batch_tokens": -5}, "'max_batch_tokens': -5 must lie in [1, inf)"),  # a ValueError there
        ({"bogus_key": 1}, "'bogus_key' is not a setting of transformers' ContinuousBatchingConfig"),  # a TypeError
        ({"max_memory_percent": 1.5}, "'max_memory_percent': 1.5 must lie in (0, 1]"),
        ({"num_blocks": 2.5}, "'num_blocks': 2.5 is not a whole number"),
        ({"num_blocks": True}, "'num_blocks': True is not a whole number"),
        ({"page_size": None}, "'page_size': None is not a whole number"),  # transformers takes no None there
        ({"allow_block_sharing": "yes"}, "'allow_block_sharing': 'yes' is not true or false"),
        ({"use_cuda_graph": [True]}, "'use_cuda_graph': [True] is not true, false or a pair of them"),
        ({"scheduler_type": "lifo"}, "'scheduler_type': 'lifo' is not one of fifo, prefill_first"),
        ({"block_size": 128}, "'block_size' takes deprecated in transformers: page_size"),
        ({"decode_compile_config": {"fullgraph": True}}, "'decode_compile_config' takes a CompileConfig"),
        ([256], "a list, not a mapping of continuous batching's settings to values"),
    ],
)
def test_settings_that_could_not_build_transformers_config_are_named(settings, words):
    assert words in continuous_batching_problem(settings)


def test_what_transformers_takes_passes_and_builds_its_config():
    settings = {"num_blocks": None, "page_size": 128, "max_batch_tokens": 512, "max_memory_percent": 0.3,
                "use_cuda_graph": [True, False], "scheduler_type": "prefill_first", "allow_block_sharing": False,
                "default_compile_level": 3, "decode_compile_config": None}  # fmt: skip
    assert continuous_batching_problem(settings) is None and continuous_batching_problem(None) is None
    assert ContinuousBatchingConfig(**settings).page_size == 128


def test_every_setting_transformers_has_is_checked_by_one_rule():
    fields = {field.name: field for field in dataclasses.fields(ContinuousBatchingConfig)}
    ruled = [*rules.WHOLE, *rules.NUMBERS, *rules.FLAGS, "use_cuda_graph", "scheduler_type", *rules.NOT_FROM_A_RECIPE]
    assert sorted(ruled) == sorted(fields)  # a setting a newer transformers adds fails here, not in a user's run
    assert {name for name, field in fields.items() if "None" in str(field.type)} == rules.CHOSEN_WHEN_NONE
    from transformers.generation.continuous_batching.scheduler import SCHEDULER_MAPPING

    assert set(rules.SCHEDULERS) == set(SCHEDULER_MAPPING)


def test_the_check_names_where_the_setting_came_from_and_only_when_continuous_batching_is_on():
    def config(on: bool) -> SimpleNamespace:
        return SimpleNamespace(use_transformers_continuous_batching=on,
                               transformers_continuous_batching_config={"page_size": 0})  # fmt: skip

    check_continuous_batching_config(config(False), "r.yaml")  # TRL builds no config then: nothing to refuse
    with pytest.raises(RecTuneError, match=r"^r.yaml: key 'transformers_continuous_batching_config': 'page_size'"):
        check_continuous_batching_config(config(True), "r.yaml")


def test_a_recipe_whose_settings_break_continuous_batching_stops_before_it_claims_its_folder(
    tmp_path, tiny_model, train_data
):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft",
        use_transformers_continuous_batching=True, transformers_continuous_batching_config={"page_size": 0},
    )  # fmt: skip
    refused = run_script("train/grpo.py", recipe, "--reward_funcs", "tests.grpo_rewards.length", check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr and not (tmp_path / "rft").exists()
    last = refused.stderr.splitlines()[-1]
    assert last == (f"error: {recipe}: key 'transformers_continuous_batching_config': 'page_size': 0 must lie in "
                    "[4, inf)")  # fmt: skip
