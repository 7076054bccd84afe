"""The plain loop's anchor with documents: attention masked to each document, as RecTune's packed batches are."""

import transformers

from perf.plain_loop import plain_loop


def attention_masks_seen(monkeypatch, tiny_model, **loop_options) -> list:
    """The attention mask the first layer's attention got at each step of a plain loop on the tiny model."""
    seen = []
    load = transformers.AutoModelForCausalLM.from_pretrained

    def load_and_watch(*args, **kwargs):
        model = load(*args, **kwargs)
        attention = model.get_decoder().layers[0].self_attn
        attention.register_forward_pre_hook(lambda _, a, kw: seen.append(kw.get("attention_mask")), with_kwargs=True)
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", load_and_watch)
    plain_loop(str(tiny_model), "cpu", 2, 48, steps=1, warmup=0, checkpointing=False, **loop_options)
    return seen


def test_documents_are_masked_apart_and_the_causal_loop_sees_all_before(monkeypatch, tiny_model):
    causal = attention_masks_seen(monkeypatch, tiny_model)[0]
    assert causal is None  # SDPA's own causal mask (its flash kernel where there is one)
    masks = attention_masks_seen(monkeypatch, tiny_model, document_tokens=16)[0]
    assert masks.shape[-2:] == (48, 48)
    for row in masks[:, 0].bool():  # documents at 0-15, 16-31, 32-47 in each of the 2 rows
        assert row[20, 16] and row[20, 20] and not row[20, 15] and not row[20, 21]  # its own document, causally
        assert row[47, 32] and not row[47, 31] and row[5, 0] and not row[5, 6]
