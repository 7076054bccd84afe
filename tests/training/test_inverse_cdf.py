"""Sampled tokens drawn by inverse CDF: the same distribution as transformers' draw, greedy picks it."""

import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from rectune.training.inverse_cdf import InverseCdfSampler, generate_drawing_by_inverse_cdf, inverse_cdf_draw


def test_the_draw_picks_the_bucket_holding_the_uniform():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3]] * 4)  # cumulative 0.1, 0.1, 0.7, 1.0
    uniforms = torch.tensor([0.05, 0.1, 0.5, 0.95])
    assert inverse_cdf_draw(probs, uniforms).tolist() == [0, 2, 2, 3]  # 0.1 lands past the empty bucket 1


def test_the_draw_scales_unnormalised_rows():
    probs = torch.tensor([[2.0, 6.0], [2.0, 6.0]])  # buckets [0, 0.25) and [0.25, 1)
    assert inverse_cdf_draw(probs, torch.tensor([0.2, 0.3])).tolist() == [0, 1]


def test_the_sampler_leaves_one_finite_score_and_follows_the_softmax():
    torch.manual_seed(0)
    scores = torch.log(torch.tensor([0.5, 0.3, 0.2, 0.0])).repeat(20_000, 1)
    drawn = InverseCdfSampler()(torch.zeros(20_000, 1, dtype=torch.long), scores)
    assert torch.equal(torch.isfinite(drawn).sum(-1), torch.ones(20_000, dtype=torch.long))
    frequencies = torch.bincount(drawn.argmax(-1), minlength=4) / 20_000
    # the standard error of a frequency near 0.5 in 20,000 draws is 0.0035
    torch.testing.assert_close(frequencies, torch.tensor([0.5, 0.3, 0.2, 0.0]), atol=0.015, rtol=0)


def test_sampled_generation_keeps_the_warpers(tiny_model):
    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    ids = torch.tensor([[2, 40, 41, 42]] * 3)
    with torch.no_grad():
        greedy = model.generate(input_ids=ids, max_new_tokens=8, do_sample=False)
        top_1 = GenerationConfig(do_sample=True, top_k=1, temperature=0.7, max_new_tokens=8)
        sampled = generate_drawing_by_inverse_cdf(model.generate, model.generation_config, input_ids=ids,
                                                  generation_config=top_1)  # fmt: skip
    assert torch.equal(sampled, greedy)  # top-k 1 leaves one token: the draw must be the greedy one


def test_sampled_generation_draws_varied_tokens_and_other_options_fall_back(tiny_model):
    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    ids = torch.tensor([[2, 40, 41, 42]] * 8)
    calls = []

    def recording_generate(**kwargs):
        calls.append(kwargs)
        return model.generate(**kwargs)

    torch.manual_seed(0)
    with torch.no_grad():
        config = GenerationConfig(do_sample=True, top_k=0, top_p=1.0, temperature=1.0, max_new_tokens=8)
        sampled = generate_drawing_by_inverse_cdf(recording_generate, model.generation_config, input_ids=ids,
                                                  generation_config=config)  # fmt: skip
        typical = GenerationConfig(do_sample=True, top_k=0, typical_p=0.9, max_new_tokens=8)
        generate_drawing_by_inverse_cdf(recording_generate, model.generation_config, input_ids=ids,
                                        generation_config=typical)  # fmt: skip
    assert len({tuple(row) for row in sampled[:, 4:].tolist()}) > 1  # not greedy: the rows differ
    assert not calls[0]["generation_config"].do_sample and config.do_sample  # the caller's config is untouched
    assert isinstance(calls[0]["logits_processor"][-1], InverseCdfSampler)
    assert calls[1]["generation_config"] is typical and calls[1]["logits_processor"] is None  # transformers' draw
