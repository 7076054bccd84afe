"""Sampling GRPO completions from merged LoRA weights: the same function, the adapter restored after."""

import pytest
import torch
from conftest import one_step_grpo_recipe, run_script
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from rectune.training.rollouts import merged_for_sampling


def lora_layers(model):
    return [m for m in model.modules() if hasattr(m, "merged") and hasattr(m, "lora_A")]


def test_merged_sampling_is_the_same_function_and_restores_the_adapter(tiny_model):
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model),
        LoraConfig(r=4, lora_alpha=8, lora_dropout=0.5, target_modules=["q_proj", "v_proj"]),
    )
    for layer in lora_layers(model):
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.5)  # B starts at 0: give the adapter an effect
    base = {name: p.detach().clone() for name, p in model.named_parameters() if "lora_" not in name}
    ids = torch.tensor([[2, 40, 41, 42, 43, 3]])
    model.eval()
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        with model.disable_adapter():
            plain = model(input_ids=ids).logits
    assert not torch.allclose(expected, plain, atol=1e-3)  # the adapter changes the function

    model.train()  # as TRL holds the policy while it samples: LoRA dropout 0.5 active
    with merged_for_sampling(model) as merged, torch.no_grad():
        assert merged and not model.training
        assert all(layer.merged for layer in lora_layers(model))
        torch.testing.assert_close(model(input_ids=ids).logits, expected, atol=1e-5, rtol=1e-5)
    assert model.training and not any(layer.merged for layer in lora_layers(model))
    for name, p in model.named_parameters():
        if name in base:
            torch.testing.assert_close(p, base[name], atol=1e-6, rtol=0)  # merged, then unmerged: rounding only
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, expected, atol=1e-5, rtol=1e-5)


def test_a_model_without_an_adapter_is_left_alone(tiny_model):
    model = AutoModelForCausalLM.from_pretrained(tiny_model).train()
    with merged_for_sampling(model) as merged:
        assert not merged and model.training


@pytest.mark.parametrize("merge", [True, False])
def test_grpo_trains_with_and_without_merged_sampling(tmp_path, tiny_model, train_data, merge):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft",
        reward_funcs=["tests.grpo_rewards.length"], merge_for_sampling=merge,
    )  # fmt: skip
    run_script("train/grpo.py", recipe)
    assert (tmp_path / "rft" / "adapter_model.safetensors").is_file()
