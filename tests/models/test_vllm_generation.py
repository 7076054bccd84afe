"""--backend vllm: what vLLM is given to load for each kind of checkpoint, checked before anything loads."""

import json
import logging

import pytest

from rectune.core.io import RecTuneError
from rectune.models.checkpoints import resolve_checkpoint
from rectune.models.fingerprints import adapter_fingerprint
from rectune.models.generation import GenerationSettings
from rectune.models.sharing import MERGED_FROM, record_chain
from rectune.models.vllm_generation import hf_decoding, max_lora_rank, vllm_model


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
    assert vllm_model(resolve_checkpoint(str(sft))) == "org/base"  # one adapter on the plain base
    sft_rft = adapter(run / "sft_rft")
    record_chain(sft_rft, "org/base", [sft])
    checkpoint = resolve_checkpoint(str(sft_rft))
    merged = sft.resolve() / "merged"
    with pytest.raises(RecTuneError) as refused:
        vllm_model(checkpoint)
    assert str(refused.value) == (
        f"--backend vllm: {sft_rft} was trained on {sft.resolve()} merged into its base, and vLLM serves one adapter "
        f"on a model folder; that model, {merged}, is not built: build it with `python train/sft_base.py "
        f"{sft.resolve()}` (or use --backend hf, which merges in memory)"
    )
    merged.mkdir()
    (merged / "config.json").write_text("{}")
    (merged / MERGED_FROM).write_text(adapter_fingerprint(sft) + "\n")  # as train/sft_base.py records it
    assert vllm_model(checkpoint) == str(merged)
    (sft / "adapter_model.safetensors").write_bytes(b"retrained")  # the SFT adapter changed since the merge
    with pytest.raises(RecTuneError, match=f"that model, {merged}, was built from an earlier version of that adapter"):
        vllm_model(checkpoint)
    assert vllm_model(resolve_checkpoint(str(rft))) == "org/base"


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
