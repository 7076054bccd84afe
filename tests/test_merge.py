"""train/merge.py: a linear merge checked numerically; the other PEFT methods run; bad inputs fail."""

import json

import pytest
import torch
from conftest import run_script
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

TARGETS = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def adapters(tmp_path_factory, tiny_model):
    """Three rank-4 adapters with random (non-zero) A and B, as three trained formats would be."""
    folder = tmp_path_factory.mktemp("adapters")
    paths = []
    for i in range(3):
        torch.manual_seed(100 + i)
        model = AutoModelForCausalLM.from_pretrained(tiny_model)
        config = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, init_lora_weights=False)
        peft_model = get_peft_model(model, config)
        peft_model.save_pretrained(folder / f"format{i}")
        paths.append(folder / f"format{i}")
    return paths


def deltas(adapter):
    """{module: scaling * B @ A} of one saved adapter."""
    weights = load_file(adapter / "adapter_model.safetensors")
    config = json.loads((adapter / "adapter_config.json").read_text())
    scaling = config["lora_alpha"] / config["r"]
    out = {}
    for key, a in weights.items():
        if "lora_A" in key:
            b = weights[key.replace("lora_A", "lora_B")]
            out[key.split(".lora_A")[0]] = scaling * b @ a
    return out


def test_linear_merge_is_the_weighted_sum_of_deltas(tmp_path, tiny_model, adapters):
    weights = [0.5, 0.3, 0.2]
    out, full = tmp_path / "merged", tmp_path / "full"
    run_script(
        "train/merge.py", "--adapters", *adapters, "--weights", *map(str, weights), "--out", out, "--full-model", full
    )
    expected = {}
    for weight, adapter in zip(weights, adapters, strict=True):
        for module, delta in deltas(adapter).items():
            expected[module] = expected.get(module, 0) + weight * delta
    merged = deltas(out)
    assert merged.keys() == expected.keys() and len(merged) == 4  # 2 layers x (q_proj, v_proj)
    for module in expected:
        assert torch.allclose(merged[module], expected[module], atol=1e-6), module
    # the full model is the base plus that sum
    base = load_file(tiny_model / "model.safetensors")
    folded = load_file(full / "model.safetensors")
    key = "model.layers.1.self_attn.v_proj.weight"
    module = next(m for m in expected if "layers.1.self_attn.v_proj" in m)
    assert torch.allclose(folded[key], base[key] + expected[module], atol=1e-6)
    # and the merged adapter loads like any adapter
    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), out)


def test_equal_weights_by_default(tmp_path, adapters):
    run_script("train/merge.py", "--adapters", *adapters, "--out", tmp_path / "m")
    expected = {m: sum(deltas(a)[m] for a in adapters) / 3 for m in deltas(adapters[0])}
    for module, delta in deltas(tmp_path / "m").items():
        assert torch.allclose(delta, expected[module], atol=1e-6)


@pytest.mark.parametrize("method", ["ties", "dare_ties", "svd"])
def test_other_peft_methods(tmp_path, adapters, method):
    run_script("train/merge.py", "--adapters", *adapters, "--method", method, "--out", tmp_path / method)
    merged = deltas(tmp_path / method)
    assert len(merged) == 4 and all(torch.isfinite(d).all() and d.abs().sum() > 0 for d in merged.values())


def test_bad_inputs(tmp_path, adapters):
    result = run_script("train/merge.py", "--adapters", adapters[0], "--out", tmp_path / "m", check=False)
    assert "merging needs at least two adapters" in result.stderr
    result = run_script(
        "train/merge.py", "--adapters", *adapters, "--weights", "0.5", "0.5", "--out", tmp_path / "m", check=False
    )
    assert "2 weights for 3 adapters" in result.stderr
    result = run_script("train/merge.py", "--adapters", adapters[0], tmp_path, "--out", tmp_path / "m", check=False)
    assert "not a PEFT adapter folder" in result.stderr
    other = tmp_path / "other"
    other.mkdir()
    config = json.loads((adapters[0] / "adapter_config.json").read_text())
    (other / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "/elsewhere"}))
    result = run_script("train/merge.py", "--adapters", adapters[0], other, "--out", tmp_path / "m", check=False)
    assert "different base models" in result.stderr
    assert not (tmp_path / "m").exists()
