"""The packed loss's attention in parts: the scores SDPA's packed mask keeps, and nothing else."""

from types import SimpleNamespace

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rectune.training import prefix_attention
from rectune.training.packing_probe import packing_problem
from rectune.training.prefix_attention import LAYOUT_KEY, PrefixParts, prefix_parts_attention
from rectune.training.shared_prefix import pack_shared_prefixes
from tests.training.test_shared_prefix import assert_same_loss_and_gradients, batch_of, grpo_trainer


def hand_packed():
    """Three prompts: [5 6 7 8] for rows 0-2 (row 1's completion empty), [9] for rows 3-4 and [3 4] for
    rows 5-6, left-padded with 0; completions right-padded."""
    prompt_ids = torch.tensor([[5, 6, 7, 8]] * 3 + [[0, 0, 0, 9]] * 2 + [[0, 0, 3, 4]] * 2)
    prompt_mask = (prompt_ids != 0).long()
    completion_ids = torch.tensor([[20, 21, 0], [0, 0, 0], [22, 23, 24], [30, 0, 0], [31, 32, 0], [40, 0, 0],
                                   [41, 0, 0]])  # fmt: skip
    return pack_shared_prefixes(prompt_ids, prompt_mask, completion_ids, (completion_ids != 0).long(), 0)


def test_the_layout_of_prompts_and_segments_by_hand():
    packed = hand_packed()
    # group 0: 5 6 7 | 8 20 | 8 22 23; group 1: | 9 | 9 31; group 2: 3 | 4 | 4
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 20, 8, 22, 23], [9, 9, 31, 0, 0, 0, 0, 0],
                                         [3, 4, 4, 0, 0, 0, 0, 0]]  # fmt: skip
    parts = packed.parts()
    assert parts.prompt_width == 3
    assert [(g.group, g.prompt_length, g.count, g.width) for g in parts.groups] == [(0, 3, 2, 3), (1, 0, 2, 2),
                                                                                    (2, 1, 2, 1)]  # fmt: skip
    # segments as (count, width) places over the flat (3 groups x 8) positions; short ones repeat their first
    assert parts.segment_places.tolist() == [3, 4, 3, 5, 6, 7, 8, 8, 9, 10, 17, 18]
    assert parts.groups[0].mask.int().tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]
    # outputs: 9 prompt rows (3 groups x width 3), then group 0's 6 segment rows, group 1's 4, group 2's 2,
    # then the zero row (21) for padding
    assert parts.source.view(3, 8).tolist() == [[0, 1, 2, 9, 10, 12, 13, 14], [15, 17, 18, 21, 21, 21, 21, 21],
                                                [6, 19, 20, 21, 21, 21, 21, 21]]  # fmt: skip


def test_a_group_of_empty_completions_and_one_token_prompts():
    parts = PrefixParts.build(3, [0, 2], [[(0, 1), (1, 2)], []], torch.device("cpu"))
    assert parts.prompt_width == 2 and [(g.group, g.count, g.width) for g in parts.groups] == [(0, 2, 2)]
    assert parts.source.view(2, 3).tolist() == [[4, 6, 7], [2, 3, 8]]


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (2, 2)])
def test_outputs_and_gradients_equal_sdpa_with_the_packed_mask(heads, kv_heads):
    packed = hand_packed()
    groups, length, dim = *packed.input_ids.shape, 8
    module = SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True)
    torch.manual_seed(0)
    q = torch.randn(groups, heads, length, dim, requires_grad=True)
    k, v = (torch.randn(groups, kv_heads, length, dim, requires_grad=True) for _ in range(2))
    real = torch.tensor([[1] * 8, [1] * 3 + [0] * 5, [1] * 3 + [0] * 5], dtype=torch.bool)  # not padding
    upstream = torch.randn(groups, length, heads, dim) * real[:, :, None, None]
    results = []
    for parts in (None, packed.parts()):
        layout = {LAYOUT_KEY: parts} if parts else {}
        out, _ = (prefix_parts_attention if parts else sdpa_attention_forward)(
            module, q, k, v, packed.allowed, scaling=0.3, **layout
        )
        grads = torch.autograd.grad(out, (q, k, v), upstream)
        results.append((out, grads))
    (out, grads), (parts_out, parts_grads) = results
    torch.testing.assert_close(parts_out[real], out[real], rtol=1e-5, atol=1e-6)
    assert parts_out[~real].abs().sum() == 0  # padding attends to nothing
    for grad, parts_grad in zip(grads, parts_grads, strict=True):
        torch.testing.assert_close(parts_grad, grad, rtol=1e-5, atol=1e-6)


def test_calls_without_a_layout_or_with_dropout_are_sdpas():
    packed = hand_packed()
    module = SimpleNamespace(num_key_value_groups=1, is_causal=True)
    q = k = v = torch.randn(3, 2, 8, 4)
    plain, _ = sdpa_attention_forward(module, q, k, v, packed.allowed)
    assert torch.equal(prefix_parts_attention(module, q, k, v, packed.allowed)[0], plain)
    torch.manual_seed(1)
    dropped, _ = sdpa_attention_forward(module, q, k, v, packed.allowed, dropout=0.5)
    torch.manual_seed(1)
    layout = {LAYOUT_KEY: packed.parts()}
    assert torch.equal(prefix_parts_attention(module, q, k, v, packed.allowed, dropout=0.5, **layout)[0], dropped)


@pytest.fixture()
def counted_layouts(monkeypatch):
    built = []
    build = PrefixParts.build.__func__

    def counting(cls, *args):
        built.append(args[1])
        return build(cls, *args)

    monkeypatch.setattr(PrefixParts, "build", classmethod(counting))
    return built


def test_the_packed_loss_takes_sdpa_in_parts_and_gives_the_model_back(
    tmp_path, tiny_model, grounded_data, counted_layouts
):
    trainer = grpo_trainer(tiny_model, grounded_data, tmp_path)
    config = trainer.model.config
    assert config._attn_implementation == "sdpa"
    assert_same_loss_and_gradients(trainer, batch_of(trainer))
    assert counted_layouts  # the shared path's forward was computed in parts
    assert config._attn_implementation == "sdpa"


def test_a_failing_forward_gives_the_attention_back():
    config = SimpleNamespace(_attn_implementation="sdpa")
    with pytest.raises(RuntimeError), prefix_attention.switched_attention(config):
        assert config._attn_implementation == prefix_attention.IMPLEMENTATION
        raise RuntimeError
    assert config._attn_implementation == "sdpa"


def checkpointed_trainer(tiny_model, grounded_data, tmp_path):
    trainer = grpo_trainer(tiny_model, grounded_data, tmp_path)
    # as transformers' training loop turns it on (non-reentrant: it checks what the recomputation saves)
    trainer.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    assert trainer.model.base_model.model.is_activation_checkpointing
    return trainer


def test_outside_a_training_step_checkpointing_keeps_the_packed_mask(
    tmp_path, tiny_model, grounded_data, counted_layouts
):
    # a backward called after the loss has returned recomputes outside the forward's switch
    trainer = checkpointed_trainer(tiny_model, grounded_data, tmp_path)
    inputs = batch_of(trainer)
    assert packing_problem(trainer, trainer.model) is None
    trainer.packing_probed = True  # its forward, without gradients, attends in parts; counted here: the loss's
    counted_layouts.clear()
    assert_same_loss_and_gradients(trainer, inputs)
    assert not counted_layouts


def test_a_checkpointed_training_step_recomputes_in_parts(
    tmp_path, tiny_model, grounded_data, counted_layouts, monkeypatch
):
    from trl import GRPOTrainer

    trainer = checkpointed_trainer(tiny_model, grounded_data, tmp_path)
    config, inputs, seen = trainer.model.config, batch_of(trainer), []

    def rollouts(self, batch):  # TRL's rollouts and scoring, here the batch already made
        seen.append(config._attn_implementation)
        return batch

    monkeypatch.setattr(GRPOTrainer, "_prepare_inputs", rollouts)

    def step_gradients(shared: bool) -> dict:
        trainer.shared_prefix = shared
        trainer.model.zero_grad()
        trainer.training_step(trainer.model, inputs, None)  # the loss and its backward
        return {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.requires_grad}

    rows, packed = step_gradients(shared=False), step_gradients(shared=True)
    assert counted_layouts  # the packed forward went through the parts, and so did its recomputation
    assert seen == ["sdpa", "sdpa"] and config._attn_implementation == "sdpa"
    assert any(g.abs().sum() > 0 for g in rows.values())
    for name, grad in rows.items():
        assert (packed[name] - grad).abs().max() <= 1e-4 * grad.abs().max().clamp(min=1e-8), name


def test_a_forward_with_a_2d_mask_in_the_switch_is_sdpas(tiny_model):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="sdpa").eval()
    ids = torch.tensor([[0, 0, 5, 6, 7], [3, 4, 5, 6, 7]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        with prefix_attention.switched_attention(model.config):
            switched = model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(switched, plain)
