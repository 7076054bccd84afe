"""Recipe values, malformed recipes and checkpoints are one line naming the key or file, before anything loads."""

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import run_script, write_recipe
from test_hostile import one_line
from transformers import T5Config
from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, SFTConfig

from rectune.core.io import DataError, RecTuneError
from rectune.models import model_folders
from rectune.models.model_folders import check_weights, safetensors_problem
from rectune.training.arguments import RftArguments, RunArguments
from rectune.training.recipe_values import check_reward_weights
from rectune.training.recipe_yaml import check_recipe_yaml
from rectune.training.recipes import parse_recipe
from rectune.training.resumable import checkpoint_problem
from rectune.training.setup import check_model_fits

SFT = (SFTConfig, ModelConfig, DatasetMixtureConfig, RunArguments)
GRPO = (GRPOConfig, ModelConfig, DatasetMixtureConfig, RunArguments, RftArguments)

OUT_OF_RANGE = [
    ({"lora_r": 0}, "key 'lora_r': 0 is below 1"),
    ({"learning_rate": -1}, "key 'learning_rate': -1 must not be negative"),
    ({"learning_rate": float("nan")}, "key 'learning_rate': nan is not a finite number"),
    ({"per_device_train_batch_size": 0}, "per_device_train_batch_size"),
    ({"max_length": 1}, "key 'max_length': 1 is below 16"),
    ({"lora_dropout": 1.5}, "key 'lora_dropout': 1.5 must lie in [0, 1)"),
    ({"max_steps": 0}, "key 'max_steps': 0"),
    # each below was a traceback from NumPy or torch once training started
    ({"seed": -1}, "key 'seed': -1 must lie in [0, 4294967295]"),
    ({"seed": 2**32}, "key 'seed': 4294967296 must lie in [0, 4294967295]"),
    ({"dataloader_num_workers": -1}, "key 'dataloader_num_workers': -1 must not be negative"),
    # 100,000 worker processes: 8 minutes of forking on 2 cores without a step, until killed
    ({"dataloader_num_workers": 100_000}, "key 'dataloader_num_workers': 100000 is more than the"),
    # each below was a traceback from torch or transformers once training started, or trained silently
    ({"neftune_noise_alpha": -1}, "key 'neftune_noise_alpha': -1 must not be negative"),
    ({"label_smoothing_factor": 2}, "key 'label_smoothing_factor': 2 must lie in [0, 1)"),
    ({"optim_args": "zzz"}, "key 'optim_args': 'zzz' is no key=value (give them as 'a=1,b=2')"),
    ({"optim_args": "a=1,"}, "key 'optim_args': '' is no key=value"),
    (
        {"gradient_checkpointing_kwargs": {"foo": 1}},
        "key 'gradient_checkpointing_kwargs': 'foo' is none of the keys checkpointing takes (context_fn, debug, "
        "determinism_check, early_stop, every_n_layers, offload, preserve_rng_state, selective, use_reentrant)",
    ),
    # named as the recipe named it: transformers mirrors the two names
    ({"activation_checkpointing_kwargs": {"every_n_layers": 0}}, "key 'activation_checkpointing_kwargs': "),
    (
        {"lr_scheduler_kwargs": {"foo": 1}},
        "key 'lr_scheduler_kwargs': 'foo' is no setting of the linear schedule (it takes last_epoch)",
    ),
    (
        {"lr_scheduler_type": "cosine", "lr_scheduler_kwargs": {"num_cycle": 2}},
        "'num_cycle' is no setting of the cosine schedule (it takes last_epoch, num_cycles)",
    ),
    ({"pad_to_multiple_of": 0}, "key 'pad_to_multiple_of': 0 is below 1"),  # a ZeroDivisionError at the first batch
    ({"torch_compile_backend": "nope"}, "key 'torch_compile_backend': 'nope' is none of no, eager, aot_eager,"),
    ({"torch_compile_mode": "fast"}, "key 'torch_compile_mode': 'fast' is none of torch's (default, lite,"),
    ({"dataset_kwargs": {"skip_prepare_dataset": True}}, "key 'dataset_kwargs': skip_prepare_dataset leaves"),
    # a distributed run's every collective timed out at once (a negative timedelta), in torch's words
    ({"ddp_timeout": -1}, "key 'ddp_timeout': -1 is below 1 seconds"),
    # no example left: datasets' bare StopIteration as the trainer began
    ({"max_train_samples": 0}, "key 'max_train_samples': 0 is below 1 examples"),
    ({"early_stopping_patience": 0}, "key 'early_stopping_patience': 0 is below 1 evaluations"),
    # each below was a traceback once the model had loaded: torch refused them as it built the optimizer, the
    # schedule as the trainer built it, a modulo by zero at the first evaluation, torch's assertion at the first batch
    ({"adam_beta1": 2.0}, "key 'adam_beta1': 2.0 must lie in [0, 1)"),
    ({"adam_beta2": 1}, "key 'adam_beta2': 1 must lie in [0, 1)"),
    ({"adam_epsilon": -1e-8}, "key 'adam_epsilon': -1e-08 must not be negative"),
    (
        {"lr_scheduler_type": "cosine_with_min_lr"},
        "key 'lr_scheduler_type': the cosine_with_min_lr schedule refuses these settings: One of min_lr or min_lr_rate "
        "should be set through the `lr_scheduler_kwargs`",
    ),
    (
        {"lr_scheduler_type": "warmup_stable_decay", "lr_scheduler_kwargs": {"decay_type": "linear"}},
        "key 'lr_scheduler_kwargs': the warmup_stable_decay schedule refuses these settings: get_wsd_schedule() "
        "missing 1 required positional argument: 'num_decay_steps'",
    ),
    (
        {"lr_scheduler_type": "polynomial", "learning_rate": 0},
        "the polynomial schedule refuses these settings: lr_end (1e-07) must be smaller than initial lr (0)",
    ),
    ({"eval_accumulation_steps": 0}, "key 'eval_accumulation_steps': 0 is below 1 (evaluation steps between"),
    (
        {"dataloader_prefetch_factor": 0, "dataloader_num_workers": 1},
        "key 'dataloader_prefetch_factor': 0 is below 1 (batches each loader",
    ),
]


def test_wandb_names_wandb_refuses_are_one_line_where_the_run_reports_to_wandb(tmp_path):
    """wandb.init refused them as the run began, a traceback once the run held its folder."""
    for values, said in [
        ({"wandb_project": "team/recsys"}, "key 'wandb_project': Invalid project name 'team/recsys': cannot contain "
         "characters '/,\\\\,#,?,%,:', found '/'"),
        ({"wandb_tags": ["ok", "x" * 65]}, "key 'wandb_tags': Tag 'xxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxx' is 65 "
         "characters. Tags must be between 1 and 64 characters"),
    ]:  # fmt: skip
        recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path="m", output_dir=str(tmp_path / "o"),
                              report_to=["wandb"], **values)  # fmt: skip
        with pytest.raises(RecTuneError) as caught:
            parse_recipe(SFT, [str(recipe)])
        assert str(caught.value) == f"{recipe}: {said}"
        recipe = write_recipe(tmp_path / "r.yaml", model_name_or_path="m", output_dir=str(tmp_path / "o"),
                              report_to=["none"], **values)  # fmt: skip
        parse_recipe(SFT, [str(recipe)])  # no W&B run: nothing to refuse


def test_schedules_given_what_they_need_are_kept(tmp_path):
    for values in (
        {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr": 1e-6}},
        {"lr_scheduler_type": "warmup_stable_decay", "lr_scheduler_kwargs": {"num_decay_steps": 3}},
        {"lr_scheduler_type": "polynomial", "learning_rate": 1e-4},
        {"adam_beta1": 0.0, "adam_beta2": 0.999, "adam_epsilon": 0.0},
    ):
        parse_recipe(
            SFT,
            [str(write_recipe(tmp_path / "r.yaml", model_name_or_path="m", output_dir=str(tmp_path / "o"), **values))],
        )
    recipe = write_recipe(
        tmp_path / "g.yaml", model_name_or_path="m", output_dir=str(tmp_path / "o"), ref_model_mixup_alpha=1.5
    )
    with pytest.raises(RecTuneError, match=r"key 'ref_model_mixup_alpha': 1.5 must lie in \[0, 1\]$"):
        parse_recipe(GRPO, [str(recipe)])


@pytest.mark.parametrize(("values", "words"), OUT_OF_RANGE, ids=[next(iter(v)) for v, _ in OUT_OF_RANGE])
def test_out_of_range_values_are_one_line_naming_the_key(tmp_path, values, words):
    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "out"), **values)
    with pytest.raises(RecTuneError, match="r.yaml") as caught:
        parse_recipe(SFT, [str(recipe)])
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_an_optimizer_whose_package_is_missing_is_one_line(tmp_path):
    """transformers said so only as training began, once the model had loaded: an ImportError, a traceback."""
    packages = {"grokadamw": "grokadamw", "lomo": "lomo_optim", "galore_adamw": "galore_torch"}
    missing = [optim for optim, package in packages.items() if importlib.util.find_spec(package) is None]
    recipe = write_recipe(tmp_path / "r.yaml", output_dir=str(tmp_path / "out"), optim=(missing or ["adamw_torch"])[0])
    if not missing:  # every one installed here: each parses
        parse_recipe(SFT, [str(recipe)])
        return
    with pytest.raises(RecTuneError, match=rf"r.yaml: key 'optim': .*install.*{packages[missing[0]]}"):
        parse_recipe(SFT, [str(recipe)])


def test_grpo_lengths_and_reward_weights(tmp_path):
    with pytest.raises(RecTuneError, match="^command line: --max_completion_length: 0 is below 1"):
        parse_recipe(GRPO, ["--output_dir", str(tmp_path), "--max_completion_length", "0"])
    # sampling settings TRL passes to generate, which raised at the first step; and a generation serving no step
    for flag, value, words in [
        ("--top_k", "-3", "--top_k: -3 must not be negative"),
        ("--repetition_penalty", "0", "--repetition_penalty: 0.0 must be above 0"),
        ("--min_p", "1.5", "--min_p: 1.5 must lie in [0, 1]"),
        ("--steps_per_generation", "0", "--steps_per_generation: 0 is below 1 steps a generation serves"),
        # clipping and masking settings TRL takes without a word: an upper bound below the ratio of 1, a quantile
        # past 1, a reference model synced every 0 steps (a modulo by zero once sync_ref_model is on)
        ("--epsilon_high", "-1", "--epsilon_high: -1.0 must not be negative"),
        ("--top_entropy_quantile", "1.5", "--top_entropy_quantile: 1.5 must lie in [0, 1]"),
        ("--ref_model_sync_steps", "0", "--ref_model_sync_steps: 0 is below 1 steps between reference model"),
        ("--delta", "0.5", "--delta: 0.5 is below 1 (an upper bound on the probability ratio"),
        ("--num_generations_eval", "0", "--num_generations_eval: 0 is below 1 completions a prompt"),
    ]:
        with pytest.raises(RecTuneError) as caught:
            parse_recipe(GRPO, ["--output_dir", str(tmp_path), flag, value])
        assert words in str(caught.value), caught.value
    with pytest.raises(
        RecTuneError, match=r"r.yaml: key 'reward_weights': 1 weight\(s\) for 2 reward\(s\) \(recall, f1\)"
    ):
        check_reward_weights([1.0], ["recall", "f1"], "r.yaml")
    check_reward_weights([1.0, 0.5], ["recall", "f1"], "r.yaml")  # one each: fine
    # four of 1e308 sum past a float: the group variance overflowed, every advantage was 0, and the run's summary
    # then raised on the steps it logged without a total reward
    with pytest.raises(RecTuneError, match=r"^r.yaml: key 'reward_weights': weights this large overflow the total"):
        check_reward_weights([1e308] * 4, ["recall", "f1", "format", "misinformed"], "r.yaml")
    with pytest.raises(RecTuneError, match=r"overflow the total reward's variance$"):
        check_reward_weights([1e155, -1.0], ["recall", "f1"], "r.yaml")  # its square passes a float
    check_reward_weights([1e150, -1.0], ["recall", "f1"], "r.yaml")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (b"lora_r: " + b"9" * 5000 + b"\n", "malformed YAML"),
        (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "shared.yaml:1: values nested more than 32 deep"),
        # PyYAML's scanner is quadratic in this depth: minutes before its stack ran out
        (b"lora_r: 8\na: " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "shared.yaml:2: values nested more than 32"),
        (b"lora_r: 8\nname: \xff\xfe\n", "not UTF-8 text"),
    ],
    ids=["5000 digits", "nested 5000 deep", "nested 100000 deep", "not UTF-8"],
)
def test_malformed_recipes_are_one_line(tmp_path, text, words):
    recipe = tmp_path / "shared.yaml"
    recipe.write_bytes(text)
    one_line(run_script("train/sft.py", recipe, check=False, timeout=60), "shared.yaml", words)


def test_a_recipe_nests_values_32_deep_and_no_deeper():
    recipe = Path("r.yaml")
    check_recipe_yaml(recipe, "a: " + "[" * 31 + "]" * 31 + "\n")  # the top mapping and 31 lists
    with pytest.raises(DataError, match=r"^r.yaml:3: values nested more than 32 deep: no recipe needs that$"):
        check_recipe_yaml(recipe, "b: 1\nc: 2\na: " + "[" * 32 + "]" * 32 + "\n")


REPEATED_KEYS = [
    ("max_steps: 5\nlearning_rate: 1.0e-4\nmax_steps: 7\n", "r.yaml:3: key 'max_steps' given twice (first on line 1)"),
    (
        "datasets:\n  - path: a.jsonl\n    split: train\n    path: b.jsonl\n",
        "r.yaml:4: key 'path' given twice (first on line 2)",
    ),
    ("model_init_kwargs: {dtype: auto, dtype: float32}\n", "r.yaml:1: key 'dtype' given twice (first on line 1)"),
    ("datasets:\n  - {path: a.jsonl}\nwandb_tags: [x]\ndatasets: []\n", "r.yaml:4: key 'datasets' given twice"),
]


@pytest.mark.parametrize(("text", "words"), REPEATED_KEYS, ids=["top level", "in a list's mapping", "flow", "after"])
def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path, text, words):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    with pytest.raises(DataError) as caught:
        parse_recipe(SFT, [str(recipe), "--output_dir", str(tmp_path / "out")])
    assert words in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_the_same_key_in_sibling_mappings_is_not_repeated(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "model_name_or_path: embedded:smollm2\n"
        "datasets:\n  - {path: a.jsonl, split: train}\n  - {path: b.jsonl, split: train}\nmax_steps: 3\n"
    )
    training, *_ = parse_recipe(SFT, [str(recipe), "--output_dir", str(tmp_path / "out")])
    assert training.max_steps == 3


WRONG_TYPES = [
    ("lora_r: sixteen\n", [], "r.yaml: key 'lora_r': invalid int value: 'sixteen'"),
    ("max_steps: 1.0e12\n", [], "r.yaml: key 'max_steps': invalid int value: '1.0e12'"),  # YAML 1.1: a string
    ("max_steps: 3\n", ["--max-steps", "ten"], "command line: --max_steps: invalid int value: 'ten'"),
    ("max_steps: 3\n", ["--lora_r"], "command line: --lora_r: expected one argument"),
    ("dtype: float64\n", [], "r.yaml: key 'dtype': 'float64' is not one of auto, bfloat16, float16, float32"),
    ("max_steps: 3\n", ["--dtype", "float64"], "command line: --dtype: invalid choice: 'float64'"),
    (
        "save_strategy: no\n",
        [],
        "r.yaml: key 'save_strategy': False is not one of no, steps, epoch, best (YAML reads an unquoted no",
    ),
]


@pytest.mark.parametrize(
    ("text", "flags", "words"),
    WRONG_TYPES,
    ids=["word for int", "exponent for int", "flag", "flag without value", "choice", "flag choice", "yaml no"],
)
def test_a_value_argparse_refuses_is_one_line_naming_the_key(tmp_path, capsys, text, flags, words):
    """Not argparse's usage of every TRL and transformers flag before its error."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text(text)
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(SFT, [str(recipe), "--output_dir", str(tmp_path / "out"), *flags])
    assert str(caught.value).startswith(words if words.startswith("command") else str(tmp_path))
    assert words in str(caught.value) and "\n" not in str(caught.value)
    assert "usage:" not in capsys.readouterr().err


def test_quoted_choices_and_the_command_lines_choices_pass(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text('model_name_or_path: m\nsave_strategy: "no"\nlr_scheduler_type: cosine\ndtype: bfloat16\n')
    training, model, *_ = parse_recipe(SFT, [str(recipe), "--output_dir", str(tmp_path), "--dtype", "float32"])
    import torch

    dtype = "float32" if torch.cuda.is_available() else None  # a CPU trains in fp32 whatever the recipe says
    assert (training.save_strategy, training.lr_scheduler_type, model.dtype) == ("no", "cosine", dtype)


UNNAMED = [
    ({}, "key 'model_name_or_path': not set (name a model: a Hugging Face id, a model folder, or embedded:smollm2)"),
    ({"model_name_or_path": " "}, "key 'model_name_or_path': not set"),  # Path(" ".strip()) would be "."
    ({"model_name_or_path": "m", "output_dir": ""}, "key 'output_dir': not set (name the run's folder)"),
    ({"model_name_or_path": "m", "max_steps": True}, "key 'max_steps': true is not a number"),  # would be 1 step
    ({"model_name_or_path": "m", "learning_rate": False}, "key 'learning_rate': false is not a number"),
]


@pytest.mark.parametrize(("values", "words"), UNNAMED, ids=["no model", "blank model", "empty out", "true", "false"])
def test_an_unnamed_model_or_folder_and_a_boolean_number_are_one_line(tmp_path, values, words):
    recipe = write_recipe(tmp_path / "r.yaml", **{"output_dir": str(tmp_path / "out"), **values})
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(GRPO, [str(recipe)])
    assert str(caught.value) == f"{recipe}: {words}" if words.endswith(")") else words in str(caught.value)


def write_safetensors(path, tensor_bytes=16):
    header = json.dumps({"w": {"dtype": "F32", "shape": [tensor_bytes // 4], "data_offsets": [0, tensor_bytes]}})
    path.write_bytes(len(header).to_bytes(8, "little") + header.encode() + b"\x00" * tensor_bytes)


def test_a_checkpoint_that_cannot_be_resumed_says_why(tmp_path):
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    state = checkpoint / "trainer_state.json"
    write_safetensors(checkpoint / "adapter_model.safetensors")
    state.write_text(json.dumps({"global_step": 2}))
    assert checkpoint_problem(checkpoint) is None
    state.write_text(json.dumps({"global_step": "2"}))  # a string where the trainer writes a number
    assert checkpoint_problem(checkpoint) == "trainer_state.json does not match the folder's step"
    state.write_text("[" * 100_000 + "]" * 100_000)
    assert checkpoint_problem(checkpoint) == "trainer_state.json is cut short or malformed"
    state.write_text(json.dumps({"global_step": 2}))
    data = (checkpoint / "adapter_model.safetensors").read_bytes()
    (checkpoint / "adapter_model.safetensors").write_bytes(data[:-3])  # the last tensor cut short
    assert checkpoint_problem(checkpoint) == "adapter_model.safetensors is cut short"
    (checkpoint / "adapter_model.safetensors").unlink()
    (checkpoint / "adapter_model.bin").write_bytes(b"\x80\x04pickle")
    assert checkpoint_problem(checkpoint) == "no safetensors weights (pickle .bin weights are not loaded)"


def test_weights_that_cannot_be_loaded_safely_or_whole_are_one_line(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.bin").write_bytes(b"\x80\x04pickle")
    with pytest.raises(DataError, match="adapter: holds pickle weights"):
        check_weights(adapter)
    (adapter / "adapter_model.bin").unlink()
    write_safetensors(adapter / "adapter_model.safetensors")
    check_weights(adapter)
    (adapter / "adapter_model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}......")
    assert safetensors_problem(adapter / "adapter_model.safetensors") == (
        "adapter_model.safetensors has no readable safetensors header"
    )
    with pytest.raises(DataError, match="no readable safetensors header"):
        check_weights(adapter)


def test_a_max_length_that_cuts_every_answer_is_one_line(tmp_path, tiny_model, train_data):
    recipe = write_recipe(
        tmp_path / "r.yaml", model_name_or_path=str(tiny_model), use_peft=True, lora_r=4, lora_alpha=8,
        lora_target_modules=["q_proj", "v_proj"], output_dir=str(tmp_path / "sft"), max_steps=1, report_to=["none"],
        datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}], max_length=20,
    )  # fmt: skip
    last = one_line(run_script("train/sft.py", recipe, check=False), "max_length 20: every training example is cut")
    shortest = int(last.split("the shortest is ")[1].split()[0])
    assert shortest > 20


TARGETS = [
    ("[q_proj]", ["q_proj"]),  # TRL unwrapped it to 'q_proj', a regular expression matching no module: a traceback
    ("q_proj", ["q_proj"]),
    ("[q_proj, v_proj]", ["q_proj", "v_proj"]),
    ("[all-linear]", "all-linear"),  # PEFT's word for every linear layer but the output head
    ("'.*\\.(q|v)_proj'", ".*\\.(q|v)_proj"),  # a regular expression stays one
]


@pytest.mark.parametrize(("text", "parsed"), TARGETS, ids=[text for text, _ in TARGETS])
def test_one_lora_target_module_is_matched_as_a_name(tmp_path, text, parsed):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model_name_or_path: m\nuse_peft: true\nlora_target_modules: {text}\n")
    _, model, *_ = parse_recipe(SFT, [str(recipe), "--output_dir", str(tmp_path)])
    assert model.lora_target_modules == parsed
    _, model, *_ = parse_recipe(SFT, ["--model_name_or_path", "m", "--output_dir", str(tmp_path),
                                      "--lora_target_modules", "q_proj"])  # fmt: skip
    assert model.lora_target_modules == ["q_proj"]


# what check_model_fits reads of SFTConfig or GRPOConfig (whose defaults ask for bf16, which a CPU refuses)
TRAINING = SimpleNamespace(trust_remote_code=False, model_init_kwargs=None, max_length=1024)


def test_a_recipes_target_pattern_that_never_ends_is_one_line(monkeypatch, tiny_model):
    # checked on the model built on the meta device, before the run claims its folder
    monkeypatch.setattr(model_folders, "PATTERN_TIME_S", 1.0)
    endless = ModelConfig(model_name_or_path=str(tiny_model), use_peft=True, lora_target_modules="(.*)*x")
    with pytest.raises(RecTuneError) as caught:
        check_model_fits(str(tiny_model), endless, TRAINING)
    assert str(caught.value) == (
        "the recipe's LoRA settings: PEFT's matching of its module patterns (target_modules, exclude_modules, "
        "rank_pattern, alpha_pattern) ran past 1 s: a regular expression that backtracks without end?"
    )
    sane = ModelConfig(use_peft=True, lora_target_modules=".*\\.(q|v)_proj")
    check_model_fits(str(tiny_model), sane, TRAINING)


def test_a_model_that_is_no_causal_language_model_is_one_line(tmp_path):
    # a hub id's configuration is read here first (a local folder's is checked before, with its weights)
    T5Config().save_pretrained(tmp_path / "t5")
    with pytest.raises(RecTuneError, match=r"t5: its model_type 't5' names no causal language model$"):
        check_model_fits(str(tmp_path / "t5"), ModelConfig(use_peft=True), TRAINING)
    # a model whose own Python the command line trusts is built by TRL alone: not here
    trusted = SimpleNamespace(trust_remote_code=True, model_init_kwargs=None)
    check_model_fits(str(tmp_path / "t5"), ModelConfig(use_peft=True), trusted)


WORDS = [  # each was TRL's ValueError at the first step, after the run had claimed its folder
    ("--loss_type", "foo", "'foo' is none of 'grpo', 'bnpo', 'dr_grpo', 'dapo', 'cispo', 'sapo', 'vespo', 'luspo'"),
    ("--importance_sampling_level", "seq", "'seq' is none of 'token', 'sequence'"),
    ("--scale_rewards", "std", "'std' is none of 'group', 'batch', 'none'"),
    ("--multi_objective_aggregation", "mean", "'mean' is none of 'sum_then_normalize', 'normalize_then_sum'"),
    ("--vllm_mode", "local", "'local' is none of 'server', 'colocate'"),
    # a head the model has not: trained silently, saved with modules_to_save that merging then refused
    ("--lora_task_type", "SEQ_CLS", "'SEQ_CLS' is none of 'CAUSAL_LM'"),
]


@pytest.mark.parametrize(("flag", "value", "words"), WORDS, ids=[f"{flag} {value}" for flag, value, _ in WORDS])
def test_a_word_grpo_reads_only_once_training_began_is_checked_first(tmp_path, flag, value, words):
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(GRPO, ["--model_name_or_path", "m", "--output_dir", str(tmp_path), flag, value])
    assert str(caught.value) == f"command line: {flag}: {words}"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model_name_or_path: m\nscale_rewards: false\nloss_type: grpo\n")  # false: TRL's none
    training, *_ = parse_recipe(GRPO, [str(recipe), "--output_dir", str(tmp_path)])
    assert (training.scale_rewards, training.loss_type) == ("none", "grpo")


def test_a_refused_value_names_where_it_was_set(tmp_path):
    """A flag typed on the command line is named as the flag: the recipe's name sent the user to a file that held
    a good value. A recipe's own value is named by the recipe, whatever else the command line sets."""
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("model_name_or_path: m\nlora_r: 16\n")
    bad.write_text("model_name_or_path: m\nlora_r: 0\n")
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(SFT, [str(good), "--output_dir", str(tmp_path), "--lora-r", "0"])
    assert str(caught.value) == "command line: --lora_r: 0 is below 1 a LoRA rank"
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(SFT, [str(bad), "--output_dir", str(tmp_path), "--learning_rate", "1e-4"])
    assert str(caught.value) == f"{bad}: key 'lora_r': 0 is below 1 a LoRA rank"
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(SFT, [str(good), "--output_dir", str(tmp_path), "--optim_args", "a"])
    assert str(caught.value) == "command line: --optim_args: 'a' is no key=value (give them as 'a=1,b=2')"
    with pytest.raises(RecTuneError) as caught:  # transformers' own refusal, naming the flag the user typed
        parse_recipe(SFT, [str(good), "--output_dir", str(tmp_path), "--dataloader_prefetch_factor", "2"])
    assert str(caught.value).startswith("command line: --dataloader_prefetch_factor can only be set when data is ")


def test_report_to_names_an_installed_integration(tmp_path):
    """An integration transformers lacks was its ValueError, one whose package is missing its RuntimeError
    (mlflow's then an AttributeError as it was collected): each as the trainer was built, after the run had
    claimed its folder."""
    from transformers.integrations.integration_utils import get_available_reporting_integrations

    recipe = tmp_path / "r.yaml"
    recipe.write_text("model_name_or_path: m\nreport_to: [wandb]\n")  # a recipe names W&B, TensorBoard or Trackio
    with pytest.raises(RecTuneError, match=r"command line: --report_to: 'nope' is none of transformers' \(azure_ml, "):
        parse_recipe(SFT, [str(recipe), "--output_dir", str(tmp_path), "--report_to", "nope"])
    installed = get_available_reporting_integrations()
    for missing in [n for n in ("mlflow", "comet_ml", "clearml", "neptune", "swanlab") if n not in installed][:2]:
        with pytest.raises(RecTuneError) as caught:
            parse_recipe(SFT, [str(recipe), "--output_dir", str(tmp_path), "--report_to", missing])
        assert str(caught.value) == (
            f"command line: --report_to: {missing} is not installed here (install it, or report to wandb or none)"
        )
    for fine in ("none", "all", "wandb"):  # "all": those installed
        parse_recipe(SFT, [str(recipe), "--output_dir", str(tmp_path), "--report_to", fine])


def test_a_refusal_of_the_configs_own_checks_names_the_command_line_when_it_caused_it(tmp_path):
    """GRPOConfig's own refusals name no key: the recipe was named even when the recipe alone parses and the command
    line's flag made the conflict."""
    recipe = tmp_path / "g.yaml"
    recipe.write_text("model_name_or_path: m\nper_device_train_batch_size: 8\nnum_generations: 4\n")
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(GRPO, [str(recipe), "--output_dir", str(tmp_path), "--num_generations", "3"])
    assert str(caught.value) == "command line: generation_batch_size (8) must be divisible by num_generations (3)."
    recipe.write_text("model_name_or_path: m\nper_device_train_batch_size: 8\nnum_generations: 3\n")
    with pytest.raises(RecTuneError) as caught:
        parse_recipe(GRPO, [str(recipe), "--output_dir", str(tmp_path), "--learning_rate", "1e-5"])
    assert str(caught.value) == f"{recipe}: generation_batch_size (8) must be divisible by num_generations (3)."


def test_a_flag_spelled_with_dashes_is_recorded_in_the_resolved_recipe(tmp_path, monkeypatch):
    """argparse takes --learning-rate for --learning_rate and trained with it, but the resolved recipe (the stage's
    recipe.yaml, the resume check, W&B's config) kept the recipe's value: a rerun from recipe.yaml trained otherwise.
    And a value checked after parsing (GRPO's reward_weights) names the command line where it was typed."""
    from rectune.training.recipes import resolved_recipe, where_set

    recipe = tmp_path / "r.yaml"
    recipe.write_text("model_name_or_path: m\nlearning_rate: 0.001\n")
    args = [str(recipe), "--output_dir", str(tmp_path), "--learning-rate", "0.5"]
    assert resolved_recipe(SFT, args)["learning_rate"] == 0.5
    assert resolved_recipe(SFT, [*args, "--no-dataloader-pin-memory"])["dataloader_pin_memory"] is False  # was left out
    monkeypatch.setattr("sys.argv", ["grpo.py", *args, "--reward-weights", "1"])
    assert (where_set("reward_weights", recipe), where_set("learning_rate", recipe)) == ("command line",) * 2
    assert where_set("max_steps", recipe) == str(recipe) and where_set("max_steps", None) == "command line"


def test_a_recipe_without_a_lora_adapter_is_one_line_before_the_run_claims_its_folder(tmp_path, tiny_model, train_data):
    """TRL trains the whole model without `use_peft`: it trained, then failed as it saved (`adapter_config.json:
    file not found`), since every stage saves, chains and merges a LoRA adapter."""
    with pytest.raises(RecTuneError, match=r"^recipe key 'use_peft': not true; RecTune trains LoRA adapters: set "):
        check_model_fits(str(tiny_model), ModelConfig(), TRAINING)
    recipe = write_recipe(
        tmp_path / "full.yaml", model_name_or_path=str(tiny_model), output_dir=str(tmp_path / "run"), max_steps=1,
        report_to=["none"], datasets=[{"path": "json", "data_files": str(train_data / "train_sft.jsonl")}],
    )  # fmt: skip
    one_line(run_script("train/sft.py", recipe, check=False), "recipe key 'use_peft': not true")
    assert not (tmp_path / "run").exists()


def test_a_recipes_paths_under_home_are_expanded_as_its_output_dir_is(tmp_path, monkeypatch):
    """transformers expands `~` in `output_dir` alone: `data_files: ~/data/train_sft.jsonl` was a file "not
    found", and so was `--train_data=~/x` on the command line."""
    monkeypatch.setenv("HOME", "/home/ada")
    recipe = write_recipe(
        tmp_path / "r.yaml", model_name_or_path="~/models/qwen", output_dir="~/runs/sft",
        datasets=[{"path": "json", "data_files": ["~/data/train_sft.jsonl"]}], wandb_tags=["~x"],
    )  # fmt: skip
    training, model, mixture, run = parse_recipe(SFT, [str(recipe), "--train_data=~/data/more"])[:4]
    assert model.model_name_or_path == "/home/ada/models/qwen" and training.output_dir == "/home/ada/runs/sft"
    assert mixture.datasets[0].data_files == ["/home/ada/data/train_sft.jsonl"]
    assert run.train_data == "/home/ada/data/more" and run.wandb_tags == ["~x"]
