"""A stranger's model folder that transformers cannot load is one line naming the file, before anything starts:
each case below was a traceback from ``from_pretrained`` (in training, after the output folder was claimed:
tests/training/test_training.py)."""

import json
import re
import shutil
import time
from pathlib import Path

import pytest
import torch
from conftest import gpt2_model, run_script
from peft import LoraConfig, PromptTuningConfig, TaskType, get_peft_model
from safetensors.torch import load_file, save_file
from test_hostile import one_line
from transformers import (
    AutoModelForCausalLM,
    EsmConfig,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    MusicgenConfig,
    OPTConfig,
)

from rectune.core.io import DataError, RecTuneError
from rectune.models import model_folders
from rectune.models.checkpoints import check_adapters_fit, load_merged
from rectune.models.finite_outputs import check_finite_outputs
from rectune.models.model_folders import check_model_folder, context_positions, learned_positions, on_meta_device
from rectune.training.views import fit_chat_template


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

    two_texts = edited_copy(tmp_path / "two_texts", tiny_model)  # a text encoder and a decoder: a ValueError
    MusicgenConfig().save_pretrained(two_texts)
    assert refusal(two_texts).startswith(
        f"{two_texts / 'config.json'}: not a configuration this transformers can load: Multiple valid text configs "
        "were found in the model config: ['text_encoder', 'decoder']"
    )

    bare = edited_copy(tmp_path / "bare", tiny_model)
    (bare / "model.safetensors").unlink()
    assert refusal(bare) == f"{bare}: holds no weights (no model.safetensors)"


def evaluation_refusal(model, tmp_path, movie_data) -> str:
    """The one line ``evaluate/run.py`` stops with on ``model``, having made no report folder."""
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    evaluated = run_script("evaluate/run.py", "--model", model, "--out", tmp_path / "e", *args, check=False)
    assert evaluated.returncode == 2, evaluated.stderr[-2000:]
    assert not (tmp_path / "e").exists()
    return evaluated.stderr.splitlines()[-1]


def test_evaluation_stops_in_one_line_before_making_a_folder(tmp_path, tiny_model, movie_data):
    wider = edited_copy(tmp_path / "wider", tiny_model, intermediate_size=128)
    line = f"error: {wider / 'model.safetensors'}: model.layers.0.mlp.down_proj.weight has shape [32, 64]"
    assert evaluation_refusal(wider, tmp_path, movie_data).startswith(line)


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
    assert result.stderr.splitlines()[-1] == (  # before the base model's weights load (PEFT's size mismatch came after)
        f"error: {adapter / 'adapter_model.safetensors'}: base_model.model.model.layers.0.self_attn.q_proj.lora_A."
        f"weight has shape [4, 16]; its adapter_config.json on {tiny_model} makes it [4, 32] (trained on another "
        "model?)"
    ), result.stderr[-600:]


def with_weights(folder, model, keep) -> Path:
    """A copy of ``model`` whose model.safetensors holds only the tensors ``keep`` accepts, with their dtypes
    and shapes as given (``keep`` returns the tensor to save, or None)."""
    shutil.copytree(model, folder)
    tensors = load_file(folder / "model.safetensors")
    save_file({name: kept for name, tensor in tensors.items() if (kept := keep(name, tensor)) is not None},
              folder / "model.safetensors")  # fmt: skip
    return folder


def test_weights_the_configuration_makes_but_the_folder_lacks_are_named(tmp_path, tiny_model):
    # The fixture has 2 layers of 9 weights each; a configuration copied from a deeper sibling names a third,
    # which transformers would start at random and evaluate, with a warning among many
    deeper = edited_copy(tmp_path / "deeper", tiny_model, num_hidden_layers=3)
    assert refusal(deeper) == (
        f"{deeper}: holds no model.layers.2.self_attn.q_proj.weight, model.layers.2.self_attn.k_proj.weight, "
        "model.layers.2.self_attn.v_proj.weight … (9 of the LlamaForCausalLM's weights its config.json makes): "
        "transformers would start them at random"
    )

    # An output layer tied to the input embeddings is saved once, under either name
    headless = with_weights(tmp_path / "headless", tiny_model, lambda name, t: None if name == "lm_head.weight" else t)
    assert refusal(headless) == (
        f"{headless}: holds no lm_head.weight (1 of the LlamaForCausalLM's weights its config.json makes): "
        "transformers would start them at random"
    )
    tied = edited_copy(tmp_path / "tied", headless, tie_word_embeddings=True)
    check_model_folder(tied)
    AutoModelForCausalLM.from_pretrained(tied)  # and transformers agrees


def test_a_configuration_of_a_million_layers_is_refused_before_it_is_built(tmp_path, tiny_model):
    # Building it on the meta device took about a millisecond a layer, 17 minutes and gigabytes in all
    huge = edited_copy(tmp_path / "huge", tiny_model, num_hidden_layers=1_000_000)
    started = time.monotonic()
    assert refusal(huge) == (
        f"{huge / 'config.json'}: num_hidden_layers is 1000000, but the weights hold 21 tensors in all (every layer "
        "has weights of its own): the configuration of another model?"
    )
    assert time.monotonic() - started < 10


def test_pre_quantized_weights_are_left_to_their_quantizer(tmp_path, tiny_model):
    # bitsandbytes stores a 4-bit weight packed in a [n, 1] uint8 tensor beside its statistics: its shape is the
    # quantizer's, not the configuration's, and transformers unpacks it as it loads
    def packed(name, tensor):
        return tensor if not name.endswith("proj.weight") else torch.zeros(tensor.numel() // 2, 1, dtype=torch.uint8)

    quantized = with_weights(tmp_path / "quantized", tiny_model, packed)
    quantization = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    check_model_folder(edited_copy(tmp_path / "with_config", quantized, quantization_config=quantization))
    with pytest.raises(DataError, match=r"proj\.weight has shape \[\d+, 1\]; config\.json makes it"):
        check_model_folder(quantized)  # without the quantizer named, the same tensors are the wrong shape


def test_a_tokenizer_with_ids_past_the_models_embeddings_is_one_line(tmp_path, tiny_model, movie_data):
    # The fixture's tokenizer (512 tokens) copied into a model of 100 token embeddings: the first id past them
    # was an IndexError traceback in evaluation (after its folder was made) and in training
    narrow = tmp_path / "narrow"
    AutoModelForCausalLM.from_config(LlamaConfig(**{
        **json.loads((tiny_model / "config.json").read_text()), "vocab_size": 100,
    })).save_pretrained(narrow)  # fmt: skip
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_model / name, narrow / name)
    line = f"{narrow}: its tokenizer has token ids up to 511, but the model has 100 token embeddings: the tokenizer of "
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    evaluated = run_script("evaluate/run.py", "--model", narrow, "--out", tmp_path / "e", *args, check=False)
    assert evaluated.returncode == 2, evaluated.stderr[-2000:]
    assert evaluated.stderr.splitlines()[-1] == f"error: {line}another model?"
    assert not (tmp_path / "e").exists()
    with pytest.raises(DataError, match=re.escape(line)):
        fit_chat_template(str(narrow), None, None)  # SFT's and GRPO's check, before the run claims its folder
    assert fit_chat_template(str(tiny_model), None, None) == (None,)


def test_prompts_past_the_models_positions_are_one_line_before_the_first_batch(tmp_path, tiny_model, movie_data):
    # GPT-2's positions are a table of n_positions rows: the batch reaching past it was an IndexError mid-run.
    # Rotary positions run on past max_position_embeddings, but a release's megabyte query ran out of memory (2 TB
    # for its attention), blamed on the batch size: the configured context, rope scaling's factor counted, bounds them
    gpt2 = gpt2_model(tmp_path / "gpt2", tiny_model, positions=64)
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "8", "--limit", "2", "--no-wandb")
    evaluated = run_script("evaluate/run.py", "--model", gpt2, "--out", tmp_path / "e", *args, check=False)
    assert evaluated.returncode == 2, evaluated.stderr[-2000:]
    assert re.fullmatch(
        f"error: {re.escape(str(gpt2))}: 2 of 2 prompts with their 8 new tokens pass its 64 learned positions \\(the "
        r"longest prompt has \d+ tokens\); lower --max-new-tokens, shorten the prompts, or use a model with a longer "
        "context",
        evaluated.stderr.splitlines()[-1],
    ), evaluated.stderr[-600:]
    assert learned_positions(AutoModelForCausalLM.from_pretrained(gpt2)) == 64
    opt = OPTConfig(vocab_size=512, hidden_size=16, ffn_dim=32, num_hidden_layers=1, num_attention_heads=2,
                    word_embed_proj_dim=16, max_position_embeddings=48)  # fmt: skip
    assert learned_positions(on_meta_device(opt)) == 48  # its table has 50 rows: 2 offset
    llama = LlamaConfig(**{**json.loads((tiny_model / "config.json").read_text()), "max_position_embeddings": 64})
    assert learned_positions(on_meta_device(llama)) is None
    assert context_positions(on_meta_device(llama)) == (64, "context positions (max_position_embeddings)")
    assert context_positions(on_meta_device(opt)) == (48, "learned positions")
    llama.rope_parameters = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}
    assert context_positions(on_meta_device(llama)) == (
        256,
        "context positions (max_position_embeddings 64 x rope factor 4.0)",
    )
    short = tmp_path / "short"  # the fixture's rotary model told it has 64 positions
    shutil.copytree(tiny_model, short)
    (short / "config.json").write_text(json.dumps({**json.loads((tiny_model / "config.json").read_text()),
                                                   "max_position_embeddings": 64}))  # fmt: skip
    evaluated = run_script("evaluate/run.py", "--model", short, "--out", tmp_path / "r", *args, check=False)
    one_line(evaluated, f"{short}: 2 of 2 prompts with their 8 new tokens pass its 64 context positions "
             "(max_position_embeddings) (the longest prompt has ")  # fmt: skip
    assert not (tmp_path / "r").exists() and not (tmp_path / "e").exists()  # no report folder left with no answer
    (tmp_path / "empty").mkdir()  # an empty folder of the user's is left empty
    evaluated = run_script("evaluate/run.py", "--model", short, "--out", tmp_path / "empty", *args, check=False)
    one_line(evaluated, "pass its 64 context positions")
    assert list((tmp_path / "empty").iterdir()) == []


def test_an_adapters_pattern_that_never_ends_stops_before_the_weights_load(tmp_path, monkeypatch, tiny_model):
    # PEFT matches an adapter's target_modules (a string is a regular expression) against every module name:
    # this one took hours on one name, in evaluation, merging and SFT→RFT alike
    monkeypatch.setattr(model_folders, "PATTERN_TIME_S", 1.0)
    adapter = tmp_path / "adapter"
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), lora).save_pretrained(adapter)
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "target_modules": "(.*)*x"}))
    started = time.monotonic()
    with pytest.raises(RecTuneError) as caught:
        load_merged(str(tiny_model), [str(adapter)], torch.float32)
    assert str(caught.value) == (
        f"{adapter}: PEFT's matching of its module patterns (target_modules, exclude_modules, rank_pattern, "
        "alpha_pattern) ran past 1 s: a regular expression that backtracks without end?"
    )
    assert time.monotonic() - started < 30
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "target_modules": ".*\\.(q|v)_proj"}))
    assert load_merged(str(tiny_model), [str(adapter)], torch.float32) is not None  # a sane pattern loads


def test_an_adapter_of_virtual_prompt_tokens_is_one_line(tmp_path, tiny_model, movie_data):
    # prompt tuning adds tokens to the input, no weight of the model: PEFT's merge_and_unload was an
    # AttributeError, a traceback, after the report folder was made
    adapter = tmp_path / "prompt_tuning"
    tuning = PromptTuningConfig(task_type=TaskType.CAUSAL_LM, num_virtual_tokens=4)
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), tuning).save_pretrained(adapter)
    assert evaluation_refusal(adapter, tmp_path, movie_data) == (
        f"error: {adapter / 'adapter_config.json'}: a PROMPT_TUNING adapter: RecTune merges adapters into the model, "
        "and virtual prompt tokens merge into no weight; give a LoRA adapter"
    )


def test_an_adapter_started_from_the_weights_svd_fits_its_base(tmp_path, tiny_model):
    # PiSSA's start computes on the base weights, which the meta-device check has not: that start is not checked
    adapter = tmp_path / "pissa"
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights="pissa")
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), lora).save_pretrained(adapter)
    assert json.loads((adapter / "adapter_config.json").read_text())["init_lora_weights"] == "pissa"
    check_adapters_fit(str(tiny_model), [str(adapter)])


def backtracking_tokenizer(folder: Path, model: Path) -> Path:
    """A copy of ``model`` whose tokenizer.json first splits text with ``(.|..)*\\z``: Oniguruma, which tokenizers
    runs it with, backtracks exponentially at each place and gives up after ten million steps, in a panic."""
    shutil.copytree(model, folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    split = {"type": "Split", "pattern": {"Regex": "(.|..)*\\z"}, "behavior": "Isolated", "invert": False}
    tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, tokenizer["pre_tokenizer"]]}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


def test_a_tokenizer_whose_pattern_gives_up_is_one_line(tmp_path, tiny_model, movie_data):
    """The Rust library's panic is a BaseException: a traceback (after a Rust backtrace), the report folder made."""
    model = backtracking_tokenizer(tmp_path / "model", tiny_model)
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    result = run_script("evaluate/run.py", "--model", model, "--out", tmp_path / "e", *args, check=False, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == (
        "error: the model's tokenizer gave up on a text (Onig: Regex search error: retry-limit-in-match over): a "
        "Split or Replace pattern in its tokenizer.json that backtracks without end? Use the tokenizer of the "
        "model it was trained from"
    )


def test_weights_whose_bytes_overlap_are_one_line(tmp_path, tiny_model):
    """A header that parses, naming the embeddings' bytes for the output layer too: safetensors refused it only as
    transformers loaded the weights, a traceback."""
    folder = tmp_path / "overlap"
    shutil.copytree(tiny_model, folder)
    raw = (folder / "model.safetensors").read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    header["lm_head.weight"]["data_offsets"] = header["model.embed_tokens.weight"]["data_offsets"]
    text = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + length :])
    # Which of the two tensors on the same bytes safetensors names varies from run to run: it sorts them by offset.
    assert re.fullmatch(
        re.escape(f"{folder}: model.safetensors: safetensors refuses it: Error while deserializing header: ")
        + r"invalid offset for tensor `(lm_head\.weight|model\.embed_tokens\.weight)`",
        refusal(folder),
    )


@pytest.mark.parametrize("offsets", ["I8", [0, "8"], [0, [0, 8]]])
def test_weights_whose_offsets_are_no_numbers_are_one_line(tmp_path, tiny_model, offsets):
    """The header's offsets were summed as they came: a string or a list there was a TypeError traceback."""
    folder = tmp_path / "offsets"
    shutil.copytree(tiny_model, folder)
    raw = (folder / "model.safetensors").read_bytes()
    length = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + length])
    header["lm_head.weight"]["data_offsets"] = offsets
    text = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + length :])
    assert refusal(folder) == f"{folder}: model.safetensors has no readable safetensors header"


def test_adapter_weights_the_configuration_makes_but_the_file_lacks_are_named(tmp_path, tiny_model, adapters):
    """Weights saved under other names (a renamed module, a hand-edited file): PEFT warned of missing keys among
    other warnings and left LoRA as it starts, adding nothing: the base model was scored as the adapter."""
    adapter = tmp_path / "renamed"
    shutil.copytree(adapters[0], adapter)
    tensors = load_file(adapter / "adapter_model.safetensors")
    save_file({name.replace("self_attn", "attn"): tensor for name, tensor in tensors.items()},
              adapter / "adapter_model.safetensors")  # fmt: skip
    with pytest.raises(DataError) as caught:
        check_adapters_fit(str(tiny_model), [str(adapter)])
    assert str(caught.value) == (
        f"{adapter / 'adapter_model.safetensors'}: holds no base_model.model.model.layers.0.self_attn.q_proj.lora_A."
        "weight, base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight, … (8 of the 8 weights its "
        "adapter_config.json makes): PEFT would leave them as they start, where the adapter changes nothing"
    )
    check_adapters_fit(str(tiny_model), [str(adapters[0])])  # every weight there: nothing to say


BREAKING_VALUES = [  # transformers loads each; the first step then raised (training) or every output was NaN
    ("attention_dropout", 3, "attention_dropout is 3: a dropout probability is a number from 0 to 1"),
    ("attention_dropout", None, "attention_dropout is None: a dropout probability is a number from 0 to 1"),
    ("rms_norm_eps", -0.5, "rms_norm_eps is -0.5: a normalisation's epsilon is a finite number of at least 0 "
     "(else NaN)"),
    ("rms_norm_eps", float("nan"), "rms_norm_eps is nan: a normalisation's epsilon is a finite number of at least 0 "
     "(else NaN)"),
    ("num_hidden_layers", -1, "num_hidden_layers is -1: a model has at least one layer"),
    ("rope_parameters", {"rope_theta": 0.0, "rope_type": "default"},
     "rope_parameters.rope_theta is 0.0: a rotary base is a finite number above 0 (else NaN)"),
]  # fmt: skip


@pytest.mark.parametrize(("key", "value", "problem"), BREAKING_VALUES)
def test_configuration_values_that_break_the_first_step_are_named(tmp_path, tiny_model, key, value, problem):
    folder = edited_copy(tmp_path / "m", tiny_model)
    values = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**values, key: value}))  # None written as null, not removed
    assert refusal(folder) == f"{folder / 'config.json'}: {problem}"


def test_only_settings_whose_default_is_a_number_are_read():
    for config in (LlamaConfig(), OPTConfig(), GPT2Config(), Gemma3TextConfig(), EsmConfig(token_dropout=True)):
        assert model_folders.config_value_problem(config) is None  # ESM's token_dropout is a flag, not a probability
    assert model_folders.config_value_problem(GPT2Config(resid_pdrop=1.5)) == (
        "resid_pdrop is 1.5: a dropout probability is a number from 0 to 1"
    )
    gemma = Gemma3TextConfig()
    gemma.rope_parameters["sliding_attention"]["rope_theta"] = -1.0
    assert model_folders.config_value_problem(gemma) == (
        "rope_parameters.sliding_attention.rope_theta is -1.0: a rotary base is a finite number above 0 (else NaN)"
    )


def test_a_model_computing_nan_is_refused_before_it_answers(tmp_path, tiny_model, movie_data):
    """Evaluation scored a model holding one NaN weight: every token the argmax of NaN logits, empty answers."""
    broken = with_weights(tmp_path / "nan", tiny_model, lambda name, tensor: tensor.index_fill(0, torch.tensor(
        [0]), float("nan")) if name == "model.layers.1.mlp.down_proj.weight" else tensor)  # fmt: skip
    assert evaluation_refusal(broken, tmp_path, movie_data) == (
        f"error: {broken}: its weight model.layers.1.mlp.down_proj.weight holds NaN or inf, so every answer would be "
        "noise"
    )

    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    check_finite_outputs(model, "fine")
    with torch.no_grad():
        model.model.norm.weight.fill_(3e38)  # finite, but the output layer's sums pass float32's largest
    with pytest.raises(RecTuneError, match=r"^big: its weights are finite but its logits are NaN or inf, so every "):
        check_finite_outputs(model, "big")
