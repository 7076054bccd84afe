"""What model_init_kwargs may not ask of from_pretrained when training loads its model: writing outside the run's
folder, pickle weights, weights where training cannot use them, or another return value; and weights or packages
the rest name that are not there are one line from the trainer, not a traceback."""

import os

import pytest
from conftest import ROOT, one_step_grpo_recipe, run_script, write_recipe
from test_hostile import one_line
from test_training import sft_recipe
from trl import DatasetMixtureConfig, ModelConfig, SFTConfig

from rectune.core.io import RecTuneError
from rectune.training.arguments import RunArguments
from rectune.training.model_init_kwargs import keep_4bit_weights_trainable, model_init_problem, set_model_init
from rectune.training.recipes import parse_recipe
from rectune.training.setup import check_kernels


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"cache_dir": "/srv/models"}, "'cache_dir' would put downloaded models in a folder of the recipe's choosing"),
        ({"offload_folder": "/tmp/x"}, "'offload_folder' offloads weights to disk, outside the run's folder"),
        ({"proxies": {"https": "http://elsewhere:3128"}}, "'proxies' would send the Hub's requests through a server"),
        ({"output_loading_info": True}, "'output_loading_info' makes from_pretrained return a tuple"),
        ({"use_safetensors": False}, "'use_safetensors': False would load pickle weights (.bin)"),
        ({"device_map": {"": "meta"}}, "'device_map': {'': 'meta'} puts weights on the meta device or disk"),
        ({"device_map": "disk"}, "'device_map': 'disk' puts weights on the meta device or disk"),
        ({"tp_size": 2}, "'tp_size' is tensor parallelism's own wiring"),
        ({"key_mapping": {"q_proj": "k_proj"}}, "'key_mapping' renames the checkpoint's weights as they load"),
        ({"kernel_config": {"a": 1}}, "'kernel_config' is an object transformers takes from Python"),
        ({"weights_only": False}, "'weights_only': False would unpickle .bin weights with all of pickle"),
        ({"dtype": "int8"}, "'dtype': 'int8' is not one of auto, bfloat16, float16, float32"),
        ({"revision": "v1.0"}, "'revision': 'v1.0': evaluation and merging load the base by name at the Hub's main"),
        ({"torch_dtype": "bfloat16"}, "'torch_dtype' is transformers' old name for 'dtype', which the run's own"),
    ],
)
def test_what_training_cannot_load_with_is_named(kwargs, words):
    assert model_init_problem(kwargs).startswith(words)


def test_what_shapes_the_model_is_left_to_transformers():
    taken = {"dtype": "bfloat16", "attn_implementation": "sdpa", "device_map": "auto", "use_safetensors": True,
             "revision": "main", "rope_scaling": {"type": "linear", "factor": 2.0}}  # fmt: skip
    assert model_init_problem(taken) is None and model_init_problem(None) is None


def test_a_recipe_is_refused_at_parse_naming_it_and_the_key(tmp_path):
    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path="m", output_dir=str(tmp_path / "out"),
                          model_init_kwargs={"cache_dir": str(tmp_path / "elsewhere")})  # fmt: skip
    with pytest.raises(RecTuneError, match=r"r.yaml: key 'model_init_kwargs': 'cache_dir' would put"):
        parse_recipe((SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments), [str(recipe)])


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"variant": "fp16"}, "{model}: holds no model.fp16.safetensors, which transformers loads the weights from"),
        ({"dtype": "int8"}, "{recipe}: key 'model_init_kwargs': 'dtype': 'int8' is not one of auto, bfloat16"),
    ],
)
def test_what_the_trainer_would_refuse_as_it_loads_is_one_line_before_the_run_claims_its_folder(
    tmp_path, tiny_model, train_data, kwargs, said
):
    """transformers' OSError (a variant's missing file) and TRL's ValueError (a dtype it does not load in) came as
    the trainer loaded the model, once the run held its folder: a traceback, and TRL's line after the claim."""
    recipe = sft_recipe(tmp_path / "r.yaml", tiny_model, train_data, tmp_path / "out", model_init_kwargs=kwargs)
    trained = run_script("train/sft.py", recipe, check=False)
    one_line(trained, said.format(model=tiny_model, recipe=recipe))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("line", "gpu_dtype"), [([], None), (["--dtype", "auto"], "auto")])
def test_the_dtype_a_recipe_gives_loads_the_model_on_a_gpu_and_fp32_on_a_cpu(tmp_path, line, gpu_dtype):
    """TRL's ModelConfig.dtype was never read: a recipe's dtype loaded the precision mode's. Not given, it is the
    precision mode's still (TRL's default float32 would load a bf16 run's weights in fp32)."""
    import torch

    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path="m", output_dir=str(tmp_path / "out"), bf16=True)
    training, model, *_ = parse_recipe(
        (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments), [str(recipe), *line]
    )
    set_model_init(training, model)
    gpu = torch.cuda.is_available()
    expected = (gpu_dtype or torch.bfloat16) if gpu else torch.float32
    assert model.dtype == (gpu_dtype if gpu else None) and training.model_init_kwargs["dtype"] == expected


def test_a_model_revision_is_refused_where_evaluation_would_load_another(tmp_path):
    """TRL's ModelConfig.model_revision was never read: training, evaluation and merging loaded the main revision."""
    recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path="m", output_dir=str(tmp_path / "out"))
    with pytest.raises(RecTuneError, match=r"^command line: --model_revision: 'v2': evaluation and merging load"):
        parse_recipe(
            (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments), [str(recipe), "--model_revision", "v2"]
        )


def test_load_in_4bit_without_bitsandbytes_is_one_line(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "bitsandbytes" else find_spec(name))
    with pytest.raises(RecTuneError, match=r"^load_in_8bit needs the bitsandbytes package"):
        check_kernels(SFTConfig(output_dir="o", use_cpu=True), ModelConfig(model_name_or_path="m", load_in_8bit=True))


def test_training_turns_off_bitsandbytes_cpu_repacking_and_nothing_else():
    """bitsandbytes' Linear4bit repacks its weights for CPU inference (one way) at an eval-mode forward without
    gradients where its flag says the CPU has AVX-512 BF16; RecTune's probe and GRPO's rollouts are such forwards."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 2)))
    model[1][0].support_avx512bf16_for_cpu = True  # as bitsandbytes sets it on such a CPU
    keep_4bit_weights_trainable(model)
    assert model[1][0].support_avx512bf16_for_cpu is False
    assert not hasattr(model[0], "support_avx512bf16_for_cpu")


def test_load_in_4bit_trains_lora_on_a_4_bit_base_that_grpo_never_merges_into(tmp_path, tiny_model, train_data):
    """TRL's ModelConfig.load_in_4bit was never read: the base trained in full precision. GRPO's rollouts merged
    the adapter into the base and back each step, which in 4 bits rounds the base: 5 times moved logits by 2.9."""
    import importlib.util

    beside = ROOT / ".venv" / "qlora"  # make install puts bitsandbytes there, out of every other test's processes
    if importlib.util.find_spec("bitsandbytes") is None and not (beside / "bitsandbytes").is_dir():
        pytest.skip("bitsandbytes is not installed (make install puts it in .venv/qlora)")
    path = {"PYTHONPATH": os.pathsep.join([str(beside), *filter(None, [os.environ.get("PYTHONPATH")])])}
    sft = sft_recipe(tmp_path / "sft.yaml", tiny_model, train_data, tmp_path / "sft", max_steps=1, load_in_4bit=True)
    trained = run_script("train/sft.py", sft, env=path)
    assert "base weights 4-bit" in trained.stdout + trained.stderr
    assert (tmp_path / "sft" / "adapter_model.safetensors").is_file()
    grpo = one_step_grpo_recipe(
        tmp_path / "grpo.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "grpo", load_in_4bit=True
    )
    trained = run_script("train/grpo.py", grpo, env=path)
    said = trained.stdout + trained.stderr
    assert "base weights 4-bit" in said and "merge_for_sampling: off, the base is quantized" in said
