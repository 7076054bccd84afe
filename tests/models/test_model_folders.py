"""A stranger's model folder that transformers cannot load is one line naming the file, before anything starts:
each case below was a traceback from ``from_pretrained`` (in training, after the output folder was claimed:
tests/training/test_training.py)."""

import json
import shutil

import pytest
import torch
from conftest import run_script
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, LlamaConfig

from rectune.core.io import DataError
from rectune.models.model_folders import check_model_folder


def edited_copy(folder, model, **config):
    """A copy of ``model`` whose config.json has ``config`` on top (None: the key removed)."""
    shutil.copytree(model, folder)
    values = json.loads((folder / "config.json").read_text())
    values.update(config)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in values.items() if v is not None}))
    return folder


def refusal(folder) -> str:
    with pytest.raises(DataError) as caught:
        check_model_folder(folder)
    return str(caught.value)


def test_each_unloadable_folder_is_named_with_its_reason(tmp_path, tiny_model):
    check_model_folder(tiny_model)  # the fixture loads: nothing to say

    wider = edited_copy(tmp_path / "wider", tiny_model, intermediate_size=128)  # the fixture's is 64, hidden 32
    assert refusal(wider) == (
        f"{wider / 'model.safetensors'}: model.layers.0.mlp.down_proj.weight has shape [32, 64]; config.json makes "
        "it [32, 128]"
    )

    unknown = edited_copy(tmp_path / "unknown", tiny_model, model_type="evilnet")
    assert refusal(unknown) == (
        f"{unknown / 'config.json'}: not a configuration this transformers can load: The checkpoint you are trying "
        "to load has model type `evilnet` but Transformers does not recognize this architecture"
    )

    other = edited_copy(tmp_path / "other", tiny_model, model_type="bert")  # Llama's weights, BERT's names
    assert refusal(other) == (
        f"{other}: none of its tensors is a weight of the BertLMHeadModel its config.json makes (that names "
        "'bert.embeddings.word_embeddings.weight'): the weights of another architecture?"
    )

    cut = edited_copy(tmp_path / "cut", tiny_model)
    (cut / "config.json").write_text('{"model_type": ')
    with pytest.raises(DataError, match=f"^{cut / 'config.json'}: not a configuration this transformers can load: "):
        check_model_folder(cut)

    refused = edited_copy(tmp_path / "refused", tiny_model)
    (refused / "generation_config.json").write_text(json.dumps({"max_new_tokens": -3}))
    assert refusal(refused) == (
        f"{refused / 'generation_config.json'}: transformers refuses it: `max_new_tokens` must be greater than 0, "
        "but is -3."
    )

    bare = edited_copy(tmp_path / "bare", tiny_model)
    (bare / "model.safetensors").unlink()
    assert refusal(bare) == f"{bare}: holds no weights (no model.safetensors)"


def test_evaluation_stops_in_one_line_before_making_a_folder(tmp_path, tiny_model, movie_data):
    wider = edited_copy(tmp_path / "wider", tiny_model, intermediate_size=128)
    line = f"error: {wider / 'model.safetensors'}: model.layers.0.mlp.down_proj.weight has shape [32, 64]"
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    evaluated = run_script("evaluate/run.py", "--model", wider, "--out", tmp_path / "e", *args, check=False)
    assert evaluated.returncode == 2 and evaluated.stderr.splitlines()[-1].startswith(line), evaluated.stderr[-2000:]
    assert not (tmp_path / "e").exists()


def test_an_adapter_trained_on_another_model_is_one_line(tmp_path, tiny_model, movie_data):
    other = tmp_path / "other"
    AutoModelForCausalLM.from_config(LlamaConfig(**{
        **json.loads((tiny_model / "config.json").read_text()), "hidden_size": 16, "intermediate_size": 32,
    })).save_pretrained(other)  # fmt: skip
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_model / name, other / name)
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    adapter = tmp_path / "adapter"
    get_peft_model(AutoModelForCausalLM.from_pretrained(other), lora).save_pretrained(adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(tiny_model)}))
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    result = run_script("evaluate/run.py", "--model", adapter, "--out", tmp_path / "e", *args, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1].startswith(
        f"error: {adapter}: does not fit {tiny_model} (trained on another model?): Error(s) in loading state_dict "
        "for PeftModel: size mismatch for"
    ), result.stderr[-600:]
