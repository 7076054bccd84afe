"""--backend vllm: what vLLM is given to load for each kind of checkpoint, checked before anything loads."""

import json

import pytest

from rectune.core.io import RecTuneError
from rectune.models.checkpoints import resolve_checkpoint
from rectune.models.fingerprints import adapter_fingerprint
from rectune.models.sharing import MERGED_FROM, record_chain
from rectune.models.vllm_generation import max_lora_rank, vllm_model


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
