"""Packing a group's rows is used only where it gives the model's own log-probabilities: architectures whose
layers do not attend through the 4-D mask, or that place tokens otherwise than the packing does, keep TRL's
rows (their packed log-probabilities were wrong, and GRPO trained on them without a word)."""

import json
import shutil

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from rectune.training.packing_probe import packing_problem
from tests.training.test_shared_prefix import batch_of, grpo_trainer

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
ROW_KEYS = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
# a Mamba layer, then an attention layer; no expert layer
JAMBA = dict(SMALL, num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=99,
             num_experts=1, mamba_d_state=4, use_mamba_kernels=False)  # fmt: skip
ARCHITECTURES = {  # model type: (its tiny configuration, why packing is not exact for it, or None)
    "qwen2": (dict(SMALL, num_key_value_heads=1), None),
    "gpt2": (dict(n_embd=32, n_layer=2, n_head=2), None),
    "opt": (dict(SMALL, ffn_dim=64, word_embed_proj_dim=32), "places a left-padded row's tokens otherwise"),
    "mpt": (dict(d_model=32, n_layers=2, n_heads=2), "places tokens by their index, not by position_ids"),
    "jamba": (JAMBA, "change with the other completions of its group"),
    "bloom": (dict(hidden_size=32, n_layer=2, n_head=2), "its forward raises on packed rows (ValueError"),
}


def tiny_of(model_type, folder, tiny_model):
    """A random model of ``model_type`` with the tiny model's tokenizer and special tokens."""
    config = AutoConfig.for_model(model_type, vocab_size=512, **ARCHITECTURES[model_type][0])
    special = json.loads((tiny_model / "config.json").read_text())
    for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
        setattr(config, key, special.get(key))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copy(tiny_model / name, folder / name)
    return folder


def row_log_probs(trainer, inputs):
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        return trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, inputs["completion_ids"].shape[1])


@pytest.mark.parametrize("model_type", list(ARCHITECTURES))
def test_packing_is_used_only_where_it_gives_the_models_log_probabilities(tmp_path, tiny_model, grounded_data,
                                                                          model_type, caplog):  # fmt: skip
    folder = tiny_of(model_type, tmp_path / model_type, tiny_model)
    trainer = grpo_trainer(folder, grounded_data, tmp_path / "out", targets="all-linear")
    inputs = batch_of(trainer)
    reason = ARCHITECTURES[model_type][1]
    trainer.model.eval()  # GPT-2's and OPT's dropout would make any two forwards differ
    used = row_log_probs(trainer, inputs)[0]  # the first packed forward checks the model first
    assert trainer.packing_probed and trainer.shared_prefix is (reason is None)
    trainer.shared_prefix = False
    torch.testing.assert_close(used, row_log_probs(trainer, inputs)[0], rtol=1e-5, atol=1e-5)  # TRL's rows'

    problem = packing_problem(trainer, trainer.model)
    if reason is None:
        assert problem is None
        return
    assert reason in problem and "packing is not exact for" in caplog.text
    rows = row_log_probs(trainer, inputs)[0]
    if "raises" not in reason:  # what training would have used without the check: not the rows' log-probs
        with torch.no_grad():
            wrong = trainer.packed_log_probs(trainer.model, *(inputs[key] for key in ROW_KEYS))
        assert ((wrong - rows) * inputs["completion_mask"]).abs().max() > 1e-5  # exact ones differ by 5e-7
