"""Every multi-process config in accelerate_configs/ trains for real with two CPU workers.

GRPO's adapters are checked for completeness, not equality: each process samples its own completions,
so one process and two do not see the same groups.

The config files themselves are used, with only the device keys overridden (rectune.training.cpu_launch: two
gloo workers through torchrun, no mixed precision, DeepSpeed's CPU accelerator). Each global batch is
the same 8 examples as a single-process run with batch 8, and SGD's update is linear in the gradient,
so the adapters must agree up to float summation order: 2 workers reduce partial gradients in another
order than one process sums them, which moves fp32 weights of size ~0.2 by ~1e-7 in 3 steps (measured);
1e-5 leaves room for that and fails on any real difference (a skipped or doubled step moves them ~1e-2).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from safetensors.torch import load_file
from test_training import sft_recipe

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="torchrun with gloo is exercised on Linux")

CONFIGS = ["ddp", "fsdp", "zero2", "zero3"]
# What Accelerate runs each config as on CPU: FSDP needs GPUs, so its CPU workers run data parallel.
EXPECTED_TYPE = {"ddp": "MULTI_CPU", "fsdp": "MULTI_CPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED"}
COMMON = {
    "per_device_train_batch_size": 4,
    "max_train_samples": 8,
    "max_steps": 3,
    "save_steps": 3,
    "learning_rate": 0.5,
    "lr_scheduler_type": "constant",
    "optim": "sgd",  # Adam's first steps are ~sign(g) and flip on float noise
    "packing": False,
    "lora_dropout": 0.0,
}
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


def needs(config: str) -> None:
    if config.startswith("zero"):
        pytest.importorskip("deepspeed", reason="DeepSpeed configs need pip install -e .[deepspeed]")


def launch(config: str, script: str, recipe, *flags: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rectune.training.cpu_launch", "--config_file",
               f"accelerate_configs/{config}.yaml", "--num_processes", "2", script, str(recipe), *flags]  # fmt: skip
    scratch = Path(recipe).parent / "tmp"  # the launch's $TMPDIR: left as found (torchrun's log folder removed)
    scratch.mkdir(exist_ok=True)
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "TMPDIR": str(scratch)}
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert list(scratch.iterdir()) == []
    return result


@pytest.fixture(scope="module")
def single(tmp_path_factory, tiny_model, train_data):
    """The reference: one process, batch 8, the same 3 steps."""
    out = tmp_path_factory.mktemp("single")
    recipe = sft_recipe(out / "r.yaml", tiny_model, train_data, out / "run", **COMMON)
    subprocess.run(
        [sys.executable, str(ROOT / "train/sft.py"), str(recipe), "--per_device_train_batch_size", "8"],
        check=True, capture_output=True, cwd=ROOT, env={**os.environ, **CPU_ONLY},
    )  # fmt: skip
    return load_file(out / "run" / "adapter_model.safetensors")


def assert_same_adapter(reference: dict, path) -> None:
    adapter = load_file(path / "adapter_model.safetensors")
    assert adapter.keys() == reference.keys()
    for key in reference:
        # complete, not a sharded stub: ZeRO-3 keeps 0-element placeholders unless the weights are gathered
        assert adapter[key].shape == reference[key].shape, key
        assert torch.allclose(adapter[key], reference[key], rtol=0, atol=1e-5), key


@pytest.mark.parametrize("config", CONFIGS)
def test_sft_under_each_config_matches_one_process(tmp_path, tiny_model, train_data, single, config):
    """ddp and zero3 are also stopped after checkpoint 2 and resumed: the same adapter as if never stopped."""
    needs(config)
    out = tmp_path / "run"
    resumed = config in ("ddp", "zero3")
    recipe = sft_recipe(
        tmp_path / "r.yaml", tiny_model, train_data, out, **{**COMMON, "save_steps": 1 if resumed else 3}
    )
    result = launch(config, "train/sft.py", recipe)
    said = result.stdout + result.stderr
    # printed by the main process only: both workers joined one group of two
    assert said.count(f"training with {EXPECTED_TYPE[config]} on 2 processes") == 1, said[-3000:]
    if config == "fsdp":
        assert "asks for FSDP, which Accelerate does not run on this device" in said
    assert "shm_comm_op built" not in said  # DeepSpeed's CPU-only all-reduce is not compiled for training
    assert_same_adapter(single, out)
    # only the main process wrote: its checkpoints, one set of run files
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [
        f"checkpoint-{n}" for n in ((1, 2, 3) if resumed else (3,))
    ]
    assert (out / "README.md").read_text().count("| stage | sft |") == 1
    if resumed:
        shutil.rmtree(out / "checkpoint-3")  # as a run stopped after checkpoint-2 leaves it: not finished
        (out / "finished.json").unlink()
        result = launch(config, "train/sft.py", recipe)  # 3 steps: resumes from checkpoint-2, trains step 3
        assert "resuming from" in result.stderr and "checkpoint-2" in result.stderr
        assert_same_adapter(single, out)


# GRPO under ddp and zero3 only: on the CPU fsdp runs as MULTI_CPU, ddp's path (its SFT test checks the
# fallback), and ZeRO-3 adds parameter gathering for generation to everything ZeRO-2 does
@pytest.mark.parametrize("config", ["ddp", "zero3"])
def test_grpo_under_each_config_saves_a_complete_adapter(tmp_path, tiny_model, train_data, single, config):
    from test_training import grpo_recipe

    needs(config)
    out = tmp_path / "rft"
    result = launch(config, "train/grpo.py", grpo_recipe(tmp_path / "g.yaml", tiny_model, train_data, out))
    said = result.stdout + result.stderr
    assert said.count(f"training with {EXPECTED_TYPE[config]} on 2 processes") == 1
    assert "rewards/recall/mean" in said
    adapter = load_file(out / "adapter_model.safetensors")
    assert adapter.keys() == single.keys()  # the same LoRA targets as the SFT reference
    assert all(adapter[k].shape == single[k].shape for k in adapter)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]  # written once, by the main process
    assert (out / "README.md").read_text().count("| stage | rft |") == 1
