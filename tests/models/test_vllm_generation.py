"""--backend vllm: what vLLM is given to load for each kind of checkpoint, checked before anything loads."""

import json
import logging
import os
import shutil
import sys
import types

import pytest
from conftest import model_with_template

from rectune.core.io import RecTuneError
from rectune.evaluation.reports import claim_report_folder, predictions_key
from rectune.models.checkpoints import Checkpoint, resolve_checkpoint
from rectune.models.fingerprints import adapter_fingerprint
from rectune.models.generation import GenerationSettings
from rectune.models.sharing import MERGED_FROM, record_chain
from rectune.models.vllm_generation import (
    check_adapter_kind,
    generate_vllm,
    hf_decoding,
    max_lora_rank,
    served_model,
    vllm_model,
)


def adapter(folder, weights=b"w", **config):
    folder.mkdir(parents=True)
    config = {"base_model_name_or_path": "org/base", "peft_type": "LORA", "r": 16, **config}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    (folder / "adapter_model.safetensors").write_bytes(weights)
    return folder


def test_an_adapter_trained_on_a_merged_sft_base_is_served_on_that_base_or_refused(tmp_path):
    """An RFT adapter served on the plain base answered as another model (0 of 8 greedy answers as the HF backend's)."""
    run = tmp_path / "run"
    sft, rft = adapter(run / "sft"), adapter(run / "rft")
    assert served_model(resolve_checkpoint(str(sft))) == "org/base"  # one adapter on the plain base
    sft_rft = adapter(run / "sft_rft")
    record_chain(sft_rft, "org/base", [sft])
    checkpoint = resolve_checkpoint(str(sft_rft))
    merged = sft.resolve() / "merged"
    with pytest.raises(RecTuneError) as refused:
        served_model(checkpoint)
    assert str(refused.value) == (
        f"--backend vllm: {sft_rft} was trained on {sft.resolve()} merged into its base, and vLLM serves one adapter "
        f"on a model folder; that model, {merged}, is not built: build it with `python train/sft_base.py "
        f"{sft.resolve()}` (or use --backend hf, which merges in memory)"
    )
    merged.mkdir()
    (merged / "config.json").write_text("{}")
    (merged / MERGED_FROM).write_text(adapter_fingerprint(sft) + "\n")  # as train/sft_base.py records it
    assert served_model(checkpoint) == str(merged)
    (sft / "adapter_model.safetensors").write_bytes(b"retrained")  # the SFT adapter changed since the merge
    with pytest.raises(RecTuneError, match=f"that model, {merged}, was built from an earlier version of that adapter"):
        served_model(checkpoint)
    assert served_model(resolve_checkpoint(str(rft))) == "org/base"


@pytest.mark.parametrize(
    ("config", "rank"),
    [({"r": 16}, 16), ({"r": 2}, 8), ({"r": 20}, 32), ({"r": 8, "rank_pattern": {"q_proj": 64}}, 64), ({}, 8)],
)
def test_vllm_sizes_its_lora_slots_for_the_adapters_largest_rank(tmp_path, config, rank):
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps(config))
    assert max_lora_rank(str(folder)) == rank


def test_a_rank_past_what_vllm_serves_is_one_line_before_anything_loads(tmp_path):
    folder = adapter(tmp_path / "a", r=1024)
    with pytest.raises(RecTuneError, match=f"--backend vllm: {folder}: LoRA rank 1024 is past the 512 vLLM serves"):
        vllm_model(resolve_checkpoint(str(folder)))


QWEN25_INSTRUCT_GENERATION = {  # Qwen/Qwen2.5-3B-Instruct's generation_config.json, the paper's model
    "bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643],
    "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0",
}  # fmt: skip


def test_vllm_decodes_with_what_hf_keeps_of_the_models_generation_config(tmp_path, caplog):
    """vLLM given sampling parameters takes nothing from the model folder: Qwen's repetition penalty applied under
    --backend hf only (a copy of the embedded model with one of 1.3: 0 of 8 greedy answers alike)."""
    qwen = tmp_path / "qwen"
    qwen.mkdir()
    (qwen / "generation_config.json").write_text(json.dumps(QWEN25_INSTRUCT_GENERATION))
    greedy = GenerationSettings(max_new_tokens=96)
    assert hf_decoding(str(qwen), greedy) == {"max_tokens": 96, "repetition_penalty": 1.05, "temperature": 0.0}
    sampled = GenerationSettings(max_new_tokens=96, do_sample=True, temperature=0.9, top_p=0.95)
    assert hf_decoding(str(qwen), sampled) == {  # the settings' temperature and top_p, the folder's top_k
        "max_tokens": 96, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 0.95, "top_k": 20, "min_p": 0.0,
    }  # fmt: skip
    bare = tmp_path / "bare"  # no generation_config.json: transformers' defaults, top_k 50 when sampling
    bare.mkdir()
    assert hf_decoding(str(bare), greedy) == {"max_tokens": 96, "repetition_penalty": 1.0, "temperature": 0.0}
    assert hf_decoding(str(bare), sampled)["top_k"] == 50
    (bare / "generation_config.json").write_text(json.dumps({"top_k": 0, "min_p": 0.1, "num_beams": 4}))
    with caplog.at_level(logging.WARNING):
        assert hf_decoding(str(bare), sampled) == {
            "max_tokens": 96, "repetition_penalty": 1.0, "temperature": 0.9, "top_p": 0.95, "top_k": 0, "min_p": 0.1,
        }  # fmt: skip
    assert f"{bare}: its generation_config.json asks for num_beams 4; ignored: one answer a query" in caplog.text


def nan_in(weights, name):
    """``weights`` (a safetensors file) with the tensor ``name`` holding one NaN, as a diverged run leaves it."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(weights)
    tensors[name][0] = float("nan")
    save_file(tensors, weights, metadata={"format": "pt"})


def test_what_vllm_would_load_is_checked_as_hf_checks_it(tmp_path, tiny_model, adapters):
    """--backend vllm started vLLM (two minutes on 2 cores) before a model folder without a chat template failed
    in its traceback; it never looked for NaN weights, whose answers --backend hf refuses."""
    assert vllm_model(resolve_checkpoint(str(tiny_model))) == str(tiny_model)
    assert vllm_model(resolve_checkpoint(str(adapters[0]))) == str(tiny_model)
    untemplated = model_with_template(tmp_path / "base", tiny_model, None)
    with pytest.raises(RecTuneError, match=f"^{untemplated}: its tokenizer has no chat template"):
        vllm_model(resolve_checkpoint(str(untemplated)))
    diverged = shutil.copytree(adapters[0], tmp_path / "diverged")
    name = "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"
    nan_in(diverged / "adapter_model.safetensors", name)
    with pytest.raises(RecTuneError, match=f"^{diverged}: its weight {name} holds NaN or inf"):
        vllm_model(resolve_checkpoint(str(diverged)))
    broken = shutil.copytree(tiny_model, tmp_path / "broken")
    nan_in(broken / "model.safetensors", "model.norm.weight")
    with pytest.raises(RecTuneError, match=f"^{broken}: its weight model.norm.weight holds NaN or inf"):
        vllm_model(resolve_checkpoint(str(broken)))
    fifo = shutil.copytree(tiny_model, tmp_path / "fifo")
    os.mkfifo(fifo / "extra.safetensors")  # opening it waits for a writer for ever
    with pytest.raises(RecTuneError, match="FIFO"):
        vllm_model(resolve_checkpoint(str(fifo)))


class FakeLLM:
    """vLLM's ``LLM`` as generate_vllm uses it, recording what it is given; serves ``max_model_len`` positions."""

    max_model_len = 2048
    given: list = []

    def __init__(self, model, tokenizer, dtype, seed, **lora):
        config = types.SimpleNamespace(max_model_len=self.max_model_len)
        self.llm_engine = types.SimpleNamespace(model_config=config)
        FakeLLM.given = [{"model": model, "tokenizer": tokenizer, "lora": lora}]

    def generate(self, chunk, params, lora_request, use_tqdm):
        FakeLLM.given.append({"chunk": chunk, "params": params, "lora_request": lora_request})
        done = types.SimpleNamespace(text="Heat (1995)", finish_reason="stop")
        return [types.SimpleNamespace(outputs=[done]) for _ in chunk]


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.setattr(FakeLLM, "max_model_len", 2048)
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = FakeLLM, dict
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = lambda name, number, path: (name, number, path)
    for module, name in ((vllm, "vllm"), (types.ModuleType("vllm.lora"), "vllm.lora"), (request, "vllm.lora.request")):
        monkeypatch.setitem(sys.modules, name, module)
    return FakeLLM


def test_vllm_is_given_the_prompts_hf_renders_as_token_ids_and_refused_past_its_positions(
    fake_vllm, tiny_model, adapters
):
    """vLLM's own chat rendering ran the template without RecTune's limits, and a prompt past max_model_len was
    vLLM's traceback mid-run (or, with its answer, an answer cut short where hf refuses in one line)."""
    from transformers import AutoTokenizer

    checkpoint = resolve_checkpoint(str(adapters[0]))
    prompt = [{"role": "system", "content": "You recommend films."}, {"role": "user", "content": "A heist film?"}]
    settings = GenerationSettings(max_new_tokens=8)
    answers = list(generate_vllm(checkpoint, [prompt, prompt], settings, model=str(tiny_model)))
    assert answers == [[(0, "Heat (1995)", {"finish_reason": "stop"}), (1, "Heat (1995)", {"finish_reason": "stop"})]]
    started, generated = fake_vllm.given
    assert started == {"model": str(tiny_model), "tokenizer": str(tiny_model), "lora": {"enable_lora": True,
                                                                                       "max_lora_rank": 8}}  # fmt: skip
    text = "<|im_start|>system\nYou recommend films.<|im_end|>\n<|im_start|>user\nA heist film?<|im_end|>\n"
    text += "<|im_start|>assistant\n"  # CHATML, ready for the answer, with no token added before it
    ids = AutoTokenizer.from_pretrained(tiny_model)(text, add_special_tokens=False)["input_ids"]
    assert generated["chunk"] == [{"prompt_token_ids": ids}] * 2
    assert generated["params"] == {"max_tokens": 8, "repetition_penalty": 1.0, "temperature": 0.0}
    assert generated["lora_request"] == ("adapter", 1, str(adapters[0]))
    fake_vllm.max_model_len = len(ids) + 7  # one position short of the prompt and its 8 new tokens
    with pytest.raises(RecTuneError) as refused:
        list(generate_vllm(checkpoint, [prompt], settings, model=str(tiny_model)))
    assert str(refused.value) == (
        f"{tiny_model}: 1 of 1 prompts with their 8 new tokens pass its {len(ids) + 7} positions vLLM serves "
        "(max_model_len) (the longest prompt has "
        f"{len(ids)} tokens); lower --max-new-tokens, shorten the prompts, or use a model with a longer context"
    )


def test_a_report_answered_by_one_local_backend_is_not_resumed_by_the_other(tmp_path):
    """The predictions' key did not name the backend: a report begun with --backend hf was resumed by vLLM, whose
    kernels' greedy answers are not transformers', and the report mixed the two without a word."""
    model = Checkpoint("model", "m", "m")
    hf = predictions_key(model, __file__, {}, GenerationSettings())
    vllm = predictions_key(model, __file__, {}, GenerationSettings(engine="vllm"))
    assert vllm["generation"] == {**hf["generation"], "engine": "vllm"}  # hf's key is the one reports always had
    out = tmp_path / "report"
    claim_report_folder(out, hf, overwrite=False)
    (out / "config.json").write_text(json.dumps({"predictions_key": hf}))
    (out / "predictions.jsonl").write_text(json.dumps({"id": "q1", "completion": "Heat (1995)"}) + "\n")
    with pytest.raises(RecTuneError, match="made with a different generation than this run; pass --overwrite"):
        claim_report_folder(out, vllm, overwrite=False)
    claim_report_folder(out, hf, overwrite=False)  # resumed by the backend that began it


@pytest.mark.parametrize(
    ("config", "what"),
    [
        ({"use_dora": True}, "DoRA (use_dora)"),
        ({"modules_to_save": ["lm_head"]}, "whole modules saved beside LoRA's (modules_to_save)"),
        ({"bias": "lora_only"}, "the base layers' biases trained (bias)"),
    ],
)
def test_an_adapter_of_a_kind_vllm_does_not_serve_is_one_line_before_anything_loads(tmp_path, config, what):
    """vLLM refused such an adapter as it first answered: a traceback after minutes of starting."""
    folder = adapter(tmp_path / "a", **config)
    with pytest.raises(RecTuneError) as refused:
        vllm_model(resolve_checkpoint(str(folder)))
    assert str(refused.value) == f"--backend vllm: {folder}: vLLM serves no adapter with {what}; use --backend hf"
    check_adapter_kind(str(adapter(tmp_path / "served", bias="none", lora_bias=True, modules_to_save=None)))


@pytest.mark.parametrize(
    ("config", "refused"),
    [
        ({"r": 8, "lora_alpha": 16, "rank_pattern": {"q_proj": 16}}, "q_proj"),  # 16 / 16 where vLLM takes 16 / 8
        ({"r": 8, "lora_alpha": 16, "alpha_pattern": {"v_proj": 32}}, "v_proj"),
        ({"r": 8, "lora_alpha": 16, "rank_pattern": {"q_proj": 16}, "alpha_pattern": {"q_proj": 32}}, None),
        ({"r": 4, "lora_alpha": 8, "use_rslora": True, "rank_pattern": {"q": 16}, "alpha_pattern": {"q": 16}}, None),
        ({"r": 4, "lora_alpha": 8, "use_rslora": True, "rank_pattern": {"q": 16}, "alpha_pattern": {"q": 32}}, "q"),
        ({"r": 8, "lora_alpha": 16, "rank_pattern": [16], "alpha_pattern": "q_proj"}, None),  # left to PEFT's check
    ],
)
def test_modules_scaled_unlike_the_adapter_are_refused_as_vllm_scales_every_module_alike(tmp_path, config, refused):
    """vLLM reads neither rank_pattern nor alpha_pattern: it scales every module by lora_alpha / r, so a module of
    its own scaling would be served with another."""
    folder = adapter(tmp_path / "a", **config)
    if refused is None:
        check_adapter_kind(str(folder))
        return
    with pytest.raises(RecTuneError) as raised:
        check_adapter_kind(str(folder))
    assert str(raised.value) == (
        f"--backend vllm: {folder}: its modules matching {refused!r} are scaled by their own rank or alpha "
        "(rank_pattern, alpha_pattern), which vLLM does not read: it would scale them as the others; use --backend hf"
    )
