"""The checkpointing keys transformers and TRL read before torch's checkpoint: taken in SFT, refused in GRPO."""

import re
import warnings

import pytest
import torch
from conftest import run_script, write_recipe
from test_training import log_history, sft_recipe
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, SFTConfig

from rectune.core.io import RecTuneError
from rectune.training.arguments import RftArguments, RunArguments
from rectune.training.checkpointing_kwargs import selective_checkpointing_under_lora
from rectune.training.recipes import parse_recipe

SFT = (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments)
GRPO = (GRPOConfig, ModelConfig, DatasetMixtureConfig, RunArguments, RftArguments)


def test_the_keys_parse_in_sft_with_their_types_and_are_refused_in_grpo(tmp_path):
    """every_n_layers and offload (transformers' Trainer) and selective (TRL's SFT) were refused as none of torch's
    checkpoint keys."""
    settings = {"every_n_layers": 2, "selective": True, "use_reentrant": False}
    recipe = write_recipe(
        tmp_path / "r.yaml", model_name_or_path="m", output_dir="o", gradient_checkpointing_kwargs=settings
    )
    assert parse_recipe(SFT, [str(recipe)])[0].activation_checkpointing_kwargs == settings
    # pinned host memory needs an accelerator: on a CPU, torch's RuntimeError at the first step
    offload = write_recipe(
        tmp_path / "o.yaml", model_name_or_path="m", output_dir="o", gradient_checkpointing_kwargs={"offload": True}
    )
    if torch.accelerator.is_available():
        parse_recipe(SFT, [str(offload)])
    else:
        with pytest.raises(RecTuneError, match=re.escape("key 'gradient_checkpointing_kwargs': 'offload' needs a GPU")):
            parse_recipe(SFT, [str(offload)])
    for bad, words in (
        ({"every_n_layers": 0}, "'every_n_layers': 0 is not a whole number of at least 1"),  # a ZeroDivisionError
        ({"every_n_layers": True}, "'every_n_layers': True is not a whole number of at least 1"),
        ({"selective": "yes"}, "'selective': 'yes' is not true or false"),
    ):
        recipe = write_recipe(
            tmp_path / "r.yaml", model_name_or_path="m", output_dir="o", activation_checkpointing_kwargs=bad
        )
        with pytest.raises(RecTuneError) as caught:
            parse_recipe(SFT, [str(recipe)])
        assert (
            str(caught.value) == f"{recipe}: key 'activation_checkpointing_kwargs': {words}"
        )  # as the recipe named it
    off = write_recipe(tmp_path / "off.yaml", model_name_or_path="m", output_dir="o", activation_checkpointing=False,
                       activation_checkpointing_kwargs={"every_n_layers": 2})  # fmt: skip
    with pytest.raises(RecTuneError) as caught:  # read only to turn checkpointing on: nothing, without a word
        parse_recipe(SFT, [str(off)])
    assert str(caught.value) == (
        f"{off}: key 'activation_checkpointing_kwargs': 'every_n_layers' does nothing with activation checkpointing "
        "off (activation_checkpointing: true)"
    )
    recipe = write_recipe(tmp_path / "g.yaml", model_name_or_path="m", output_dir="o")
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(GRPO, [str(recipe), "--gradient_checkpointing_kwargs", '{"every_n_layers": 2}'])
    assert str(caught.value) == (
        "command line: --gradient_checkpointing_kwargs: 'every_n_layers' (checkpoint one decoder layer in this many "
        "(transformers)) is lost after GRPO's first step: TRL's GRPO turns checkpointing back on around each rollout "
        "with torch's keys only; it works in SFT"
    )
    with pytest.raises(RecTuneError, match="'selective' .* is read in SFT only: TRL's GRPO hands it on to torch's"):
        parse_recipe(GRPO, [str(recipe), "--gradient_checkpointing_kwargs", '{"selective": true}'])


def test_trl_grpo_turns_checkpointing_back_on_without_the_trainers_keys(tiny_model):
    """Why GRPO refuses them, as TRL 1.16 and transformers 5.24 behave: a later version that keeps them fails this
    test, and the refusal can go."""
    from transformers import AutoModelForCausalLM
    from trl.models.utils import disable_gradient_checkpointing

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    model.activation_checkpointing_enable(every_n_layers=2)
    assert [layer.gradient_checkpointing for layer in model.model.layers] == [True, False]
    with pytest.warns(FutureWarning), disable_gradient_checkpointing(model, {"every_n_layers": 2}):
        # as TRL's GRPO computes each rollout's log-probabilities: off, then on again as it leaves
        assert not any(layer.gradient_checkpointing for layer in model.model.layers)
    assert [layer.gradient_checkpointing for layer in model.model.layers] == [True, True]


def test_selective_checkpointing_reaches_the_layers_under_the_adapter(tiny_model):
    """TRL wraps the PEFT model's enabling method; transformers' Trainer enables checkpointing on the model under it,
    so `selective` reached torch's checkpoint: a ValueError at the first step."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from trl.models import enable_selective_activation_checkpointing

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=4, target_modules=["q_proj"]))
    args = type("Args", (), {"gradient_checkpointing_kwargs": {"selective": True}})()
    enable_selective_activation_checkpointing(model)  # what TRL's SFTTrainer does
    selective_checkpointing_under_lora(type("Trainer", (), {"args": args, "model": model})())
    with warnings.catch_warnings(action="ignore", category=FutureWarning):  # as transformers' Trainer.train does
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"selective": True})
    bound = model.get_base_model().model.layers[0]._gradient_checkpointing_func.keywords
    assert "selective" not in bound and bound["use_reentrant"] is False and "context_fn" in bound
    model.train()
    ids = torch.tensor([[5, 6, 7, 8]])
    model(input_ids=ids, labels=ids).loss.backward()


def test_sft_trains_with_every_n_layers_and_selective_to_the_same_losses(tmp_path, tiny_model, train_data):
    """Checkpointing fewer layers, or saving attention's output, recomputes less: the losses are those of plain
    checkpointing, and of none."""
    losses = {}
    for name, settings in (
        ("none", None),
        ("all", {}),
        ("every_2", {"every_n_layers": 2}),
        ("selective", {"selective": True}),
    ):
        extra = {"gradient_checkpointing": False} if settings is None else {"gradient_checkpointing_kwargs": settings}
        recipe = sft_recipe(tmp_path / f"{name}.yaml", tiny_model, train_data, tmp_path / name, max_steps=3, **extra)
        run_script("train/sft.py", recipe)
        losses[name] = [entry["loss"] for entry in log_history(tmp_path / name) if "loss" in entry]
    assert len(losses["none"]) == 3
    for name in ("all", "every_2", "selective"):
        assert losses[name] == pytest.approx(losses["none"], rel=1e-5), (name, losses)
