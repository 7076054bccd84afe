"""GRPO's prompts against the positions its rollouts may take: a colocated vLLM's ``vllm_max_model_length`` where
it serves fewer than the model (vLLM refused a longer prompt at the step that drew it, and ended a completion at
its last position without a word)."""

import pytest
from datasets import Dataset
from trl import GRPOConfig

from rectune.core.io import RecTuneError
from rectune.training.prompt_positions import VLLM_POSITIONS, check_prompts_fit, rollout_positions
from rectune.training.views import view_examples

ROTARY = (32768, "context positions (max_position_embeddings)")


def grpo_args(tmp_path, **values) -> GRPOConfig:
    return GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **values)


def test_a_colocated_vllm_serving_fewer_positions_than_the_model_sets_the_limit(tmp_path):
    served = grpo_args(tmp_path, use_vllm=True, vllm_max_model_length=2048)  # colocate is TRL's default mode
    assert rollout_positions(served, ROTARY) == (2048, VLLM_POSITIONS)
    assert rollout_positions(served, None) == (2048, VLLM_POSITIONS)  # a configuration that names none
    assert rollout_positions(served, (1024, "learned positions")) == (1024, "learned positions")  # the model's fewer
    assert rollout_positions(grpo_args(tmp_path, use_vllm=True), ROTARY) == ROTARY  # vLLM takes the model's
    assert rollout_positions(grpo_args(tmp_path, vllm_max_model_length=2048), ROTARY) == ROTARY  # no vLLM
    server = grpo_args(tmp_path, use_vllm=True, vllm_mode="server", vllm_max_model_length=2048)
    assert rollout_positions(server, ROTARY) == ROTARY  # the server's own length is set where it starts


def test_prompts_past_a_colocated_vllms_length_say_which_key_to_raise(tiny_model, train_data):
    prompts = Dataset.from_list(view_examples(train_data / "train_rft.jsonl"))  # the longest: 161 tokens
    check_prompts_fit(str(tiny_model), (169, VLLM_POSITIONS), 8, prompts)
    with pytest.raises(RecTuneError) as refused:
        check_prompts_fit(str(tiny_model), (168, VLLM_POSITIONS), 8, prompts)
    assert str(refused.value) == (
        "recipe key 'max_completion_length': 1 of 9 prompts with their 8 new tokens pass the 168 positions a "
        f"colocated vLLM serves (vllm_max_model_length) of {tiny_model} (the longest prompt has 161 tokens); raise "
        "vllm_max_model_length, lower max_completion_length, shorten the prompts, or use a model with a longer context"
    )
