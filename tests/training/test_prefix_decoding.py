"""Decoding with each prompt's keys and values kept once gives the attention, and the samples, of the
copied cache."""

import math
from types import SimpleNamespace

import pytest
import torch
from transformers import AttentionInterface, DynamicCache
from transformers.integrations.sdpa_attention import repeat_kv

from rectune.training.prefix_decoding import (
    ATTENTION,
    SharedPrefixCache,
    can_share,
    decoding_shared_prefix,
    shared_prefix_attention,
)


def shared_cache(prefix_keys, prefix_values, prefix_mask, inverse):
    prefilled = DynamicCache()
    prefilled.update(prefix_keys, prefix_values, 0)
    return SharedPrefixCache(prefilled, prefix_mask, inverse)


def attend(cache, query, own_keys, own_values, scaling):
    """The first layer's attention output, ``own_keys``/``own_values`` appended to its rows' caches."""
    from transformers import LlamaConfig

    model = SimpleNamespace(config=LlamaConfig(attn_implementation="sdpa"))
    keys, values = cache.layers[0].update(own_keys, own_values)
    with decoding_shared_prefix(model, cache):
        assert model.config._attn_implementation == ATTENTION
        output, _ = shared_prefix_attention(SimpleNamespace(layer_idx=0), query, keys, values, None, scaling=scaling)
    assert model.config._attn_implementation == "sdpa"  # restored
    return output


def test_one_query_by_hand():
    # one group of two rows, one head, one dimension, scale 1: the prompt's keys 0 and ln 3 (values 1 and 2),
    # each row's own key 0 (values 4 and 0); weights e^0 : e^ln3 : e^0 = 1 : 3 : 1
    keys, values = torch.tensor([0.0, math.log(3)]).view(1, 1, 2, 1), torch.tensor([1.0, 2.0]).view(1, 1, 2, 1)
    own_values = torch.tensor([4.0, 0.0]).view(2, 1, 1, 1)
    cache = shared_cache(keys, values, torch.tensor([[1, 1]]), torch.tensor([0, 0]))
    output = attend(cache, torch.ones(2, 1, 1, 1), torch.zeros(2, 1, 1, 1), own_values, 1.0)
    torch.testing.assert_close(output.flatten(), torch.tensor([(1 + 6 + 4) / 5, (1 + 6 + 0) / 5]))
    # the prompt's first token is padding: 0 : 3 : 1
    cache = shared_cache(keys, values, torch.tensor([[0, 1]]), torch.tensor([0, 0]))
    output = attend(cache, torch.ones(2, 1, 1, 1), torch.zeros(2, 1, 1, 1), own_values, 1.0)
    torch.testing.assert_close(output.flatten(), torch.tensor([(6 + 4) / 4, 6 / 4]))


@pytest.mark.parametrize("new_tokens", [1, 3])
def test_equals_sdpa_over_the_copied_cache(new_tokens):
    # 2 prompts x 3 rows, their rows interleaved; 4 query heads on 2 key heads; prompt 1 left-padded
    torch.manual_seed(0)
    groups, heads, kv_heads, prompt, own, dim = 2, 4, 2, 5, 4, 8
    inverse = torch.tensor([1, 0, 1, 0, 0, 1])
    prefix_keys, prefix_values = torch.randn(groups, kv_heads, prompt, dim), torch.randn(groups, kv_heads, prompt, dim)
    prefix_mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    rows = len(inverse)
    query = torch.randn(rows, heads, new_tokens, dim)
    own_keys, own_values = torch.randn(rows, kv_heads, own, dim), torch.randn(rows, kv_heads, own, dim)
    cache = shared_cache(prefix_keys, prefix_values, prefix_mask, inverse)
    assert cache.order is not None  # the rows are not group by group
    output = attend(cache, query, own_keys, own_values, 0.3)
    assert cache.layers[0].get_seq_length() == prompt + own

    keys = repeat_kv(torch.cat([prefix_keys[inverse], own_keys], dim=2), heads // kv_heads)
    values = repeat_kv(torch.cat([prefix_values[inverse], own_values], dim=2), heads // kv_heads)
    causal = torch.ones(new_tokens, own, dtype=torch.bool).tril(own - new_tokens)
    prompt_mask = prefix_mask[inverse].bool()[:, None, :].expand(-1, new_tokens, -1)
    mask = torch.cat([prompt_mask, causal.expand(rows, -1, -1)], dim=-1)
    expected = torch.nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask[:, None], scale=0.3)
    torch.testing.assert_close(output, expected.transpose(1, 2))


def test_only_llama_like_models_on_a_cpu_and_equal_groups_share():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    def model(config):
        return SimpleNamespace(config=config)

    even, uneven = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 0, 1])
    assert can_share(model(LlamaConfig()), even, 2) and can_share(model(Qwen2Config()), even, 2)
    assert not can_share(model(LlamaConfig()), uneven, 2)
    assert not can_share(model(LlamaConfig()), even.to("meta"), 2)  # rows on another device keep their copies
    assert not can_share(model(Qwen2Config(use_sliding_window=True, max_window_layers=0)), even, 2)
    assert not can_share(model(MistralConfig()), even, 2)


@pytest.mark.parametrize("interleaved", [False, True])
def test_sampled_completions_equal_the_unshared_paths(tmp_path, interleaved, monkeypatch):
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from rectune.training.rollouts import generating_with

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=1,
                         initializer_range=0.3)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    prompts = [[5, 6, 7, 8, 9, 10], [0, 0, 11, 12, 13, 14]]  # the second left-padded
    order = [0, 1] * 3 if interleaved else [0, 0, 0, 1, 1, 1]
    input_ids = torch.tensor([prompts[i] for i in order])
    attention_mask = (input_ids != 0).long()
    generation = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=10,
                                  min_new_tokens=10, pad_token_id=0, eos_token_id=1)  # fmt: skip
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return shared_prefix_attention(*args, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, ATTENTION, counted)
    outputs = {}
    for name, share, cascade in (("unshared", False, False), ("copied", True, False), ("cascade", True, True)):
        torch.manual_seed(3)
        with generating_with(model, model, share_prompts=share, cascade=cascade):
            outputs[name] = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                           generation_config=generation, output_logits=True,
                                           return_dict_in_generate=True)  # fmt: skip
        assert len(calls) == (10 * config.num_hidden_layers if cascade else 0)  # every decoding step, every layer
    assert model.config._attn_implementation == "sdpa"
    for name in ("copied", "cascade"):
        assert torch.equal(outputs[name].sequences, outputs["unshared"].sequences)
        for logits, expected in zip(outputs[name].logits, outputs["unshared"].logits, strict=True):
            torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-4)
