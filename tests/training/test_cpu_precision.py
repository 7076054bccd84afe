"""The precision a run trains in without a GPU: fp32 unless bf16 is asked and the CPU computes it."""

import pytest
import torch
import yaml
from conftest import run_script
from safetensors.torch import load_file
from test_training import grpo_recipe, log_history, sft_recipe
from trl import DatasetMixtureConfig, ModelConfig, SFTConfig

from rectune.training import recipes
from rectune.training.arguments import RunArguments
from rectune.training.cpu_precision import bf16_asked, cpu_has_bfloat16, cpu_precision
from rectune.training.recipes import parse_recipe

SFT_TYPES = (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments)


@pytest.mark.parametrize(
    ("args", "recipe", "asked"),
    [
        ([], {}, False),  # TRL's default bf16 is no request
        ([], {"bf16": True}, True),
        ([], {"bf16": False}, False),
        ([], {"bf16": "yes"}, False),  # no boolean: the recipe's type check refuses it, not this
        (["--bf16", "true"], {}, True),
        (["--bf16=yes"], {}, True),
        (["--bf16", "false"], {"bf16": True}, False),  # the command line wins over the recipe
        (["--no_bf16"], {"bf16": True}, False),
        (["--config", "r.yaml", "--learning_rate", "1e-4", "--bf16", "1"], {}, True),
        (["--bf16", "maybe"], {"bf16": True}, False),  # left to the full parse, which refuses it
        (["--bf16_full_eval", "true"], {}, False),
    ],
)
def test_bf16_is_asked_by_the_command_line_or_else_the_recipe(args, recipe, asked):
    assert bf16_asked(args, recipe) is asked


def test_a_cpu_run_trains_in_bf16_only_where_asked_and_computed():
    assert cpu_precision(True, True) == (
        {"fp16": False, "use_cpu": True, "bf16": True},
        "training on CPU in bf16 (asked, and this CPU has bfloat16 instructions)",
    )
    settings, why = cpu_precision(True, False)
    assert settings == {"fp16": False, "use_cpu": True, "bf16": False}
    assert why == (
        "training on CPU in fp32: bf16: true asked, but this CPU has no bfloat16 instructions "
        "(emulated, it would be slower than fp32)"
    )
    assert cpu_precision(False, True) == ({"fp16": False, "use_cpu": True, "bf16": False}, "training on CPU in fp32")


@pytest.mark.parametrize("has_bfloat16", [True, False])
def test_a_recipe_asking_bf16_parses_to_what_the_cpu_computes(tmp_path, monkeypatch, has_bfloat16):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the CPU rule, on a GPU machine too
    monkeypatch.setattr(recipes, "cpu_has_bfloat16", lambda: has_bfloat16)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model_name_or_path: m\noutput_dir: out\nbf16: true\nfp16: false\n")
    training, *_ = parse_recipe(SFT_TYPES, [str(recipe)])
    assert training.use_cpu and not training.fp16 and training.bf16 is has_bfloat16
    training, *_ = parse_recipe(SFT_TYPES, [str(recipe), "--bf16", "false"])
    assert not training.bf16
    recipe.write_text("model_name_or_path: m\noutput_dir: out\n")  # TRL's default asks nothing
    training, *_ = parse_recipe(SFT_TYPES, [str(recipe)])
    assert not training.bf16
    training, *_ = parse_recipe(SFT_TYPES, [str(recipe), "--bf16", "yes"])
    assert training.bf16 is has_bfloat16


def test_sft_and_grpo_asked_for_bf16_train_in_what_the_device_computes(tmp_path, tiny_model, train_data):
    """On a GPU: bf16 autocast over bfloat16 base weights; on a CPU with bfloat16 instructions: over fp32 ones, GRPO
    sampling from a bfloat16 copy; adapters in fp32, the loss following the fp32 run's. On a CPU without them:
    fp32, and the line says why."""
    gpu = torch.cuda.is_available()
    in_bf16 = gpu or cpu_has_bfloat16()
    setting = f"{'bf16' if in_bf16 else 'fp32'}, base weights {'bfloat16' if gpu else 'float32'}"
    recipe = sft_recipe(tmp_path / "s.yaml", tiny_model, train_data, tmp_path / "sft", per_device_train_batch_size=9,
                        max_steps=12, save_steps=12, learning_rate=1e-2)  # fmt: skip
    result = run_script("train/sft.py", recipe, "--bf16", "true")
    assert f", {setting}, attention" in result.stdout
    if not gpu:
        expected = "training on CPU in bf16" if in_bf16 else "training on CPU in fp32: bf16: true asked"
        assert f"no CUDA device: {expected}" in result.stderr
    adapter = load_file(tmp_path / "sft" / "adapter_model.safetensors")
    assert {tensor.dtype for tensor in adapter.values()} == {torch.float32}
    assert yaml.safe_load((tmp_path / "sft" / "recipe.yaml").read_text())["bf16"] is in_bf16  # what it trained in
    # the same 9 examples every step: measured 7.683 -> 6.582 in bf16, 7.685 -> 6.578 in fp32 (CPU, AVX-512 BF16)
    run_script("train/sft.py", recipe, "--bf16", "false", "--output_dir", tmp_path / "fp32")
    losses = [[entry["loss"] for entry in log_history(out / "checkpoint-12") if "loss" in entry]
              for out in (tmp_path / "sft", tmp_path / "fp32")]  # fmt: skip
    assert losses[0][-1] < 0.9 * losses[0][0]
    assert losses[0] == pytest.approx(losses[1], rel=0.01)

    rft = tmp_path / "rft"
    recipe = grpo_recipe(tmp_path / "g.yaml", tiny_model, train_data, rft)
    result = run_script("train/grpo.py", recipe, "--bf16", "true")
    assert f", {setting}, attention" in result.stdout
    sampled = "rollouts: sampled in bfloat16, as the run trains in bf16 (rollout_dtype: float32 keeps fp32)"
    assert (sampled in result.stderr) is (in_bf16 and not gpu)
    history = log_history(rft / "checkpoint-2")
    assert all(torch.isfinite(torch.tensor(entry["loss"])) for entry in history if "loss" in entry)
