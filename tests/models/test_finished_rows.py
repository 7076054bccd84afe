"""Decoding stops computing the rows that have finished, and samples the tokens it sampled before."""

import pytest
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from rectune.models.finished_rows import FinishedRows, effective_config, end_of_sequence_ids, skipping_finished_rows
from rectune.training.rollouts import generating_with

PAD, EOS = 0, 1


@pytest.fixture
def small_vocabulary_model():
    # 16 words, so that a random model ends many rows well before the last
    config = LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, pad_token_id=PAD, eos_token_id=EOS,
                         initializer_range=0.3)  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def rows_computed(model) -> tuple[list[int], object]:
    """The rows of each forward of ``model``'s decoder, and the hook's handle."""
    seen: list[int] = []

    def record(module, args, kwargs):
        seen.append(kwargs["input_ids"].shape[0])

    return seen, model.model.register_forward_pre_hook(record, with_kwargs=True)


def test_the_last_processor_marks_rows_that_chose_an_end_of_sequence():
    tracker = FinishedRows(torch.tensor([1, 2]), rows=4)
    scores = torch.tensor([[0.0, 5.0, 0.0], [9.0, 0.0, 0.0], [0.0, 0.0, 3.0], [1.0, 0.0, 0.0]])
    assert tracker(None, scores) is scores  # the scores pass unchanged
    assert tracker.finished.tolist() == [True, False, True, False]
    assert tracker.unfinished.tolist() == [1, 3]
    tracker(None, torch.tensor([[9.0, 0.0, 0.0]] * 3 + [[0.0, 1.0, 0.0]]))  # a finished row stays finished
    assert tracker.unfinished.tolist() == [1]


def test_no_row_is_left_out_before_one_finishes():
    tracker = FinishedRows(torch.tensor([1]), rows=2)
    tracker(None, torch.tensor([[3.0, 0.0], [3.0, 0.0]]))
    assert tracker.unfinished is None


def test_the_end_of_sequence_is_merged_as_generate_merges_it():
    model_defaults = GenerationConfig(eos_token_id=1, do_sample=True)
    assert end_of_sequence_ids(
        effective_config(model_defaults, {"generation_config": GenerationConfig(eos_token_id=[3, 4])})
    ) == [3, 4]
    assert end_of_sequence_ids(effective_config(model_defaults, {"generation_config": GenerationConfig()})) == [1]
    assert end_of_sequence_ids(effective_config(model_defaults, {"eos_token_id": 2})) == [2]  # a keyword wins
    assert end_of_sequence_ids(effective_config(GenerationConfig(), {})) == []
    assert effective_config(model_defaults, {}).do_sample  # the model's, where nothing is given
    assert not effective_config(model_defaults, {"do_sample": False}).do_sample


@pytest.mark.parametrize("order", [[0, 0, 0, 0, 1, 1, 1, 1], [0, 1, 0, 1, 0, 1, 0, 1]])
def test_samples_equal_every_row_decoded_with_fewer_rows_computed(small_vocabulary_model, order):
    model = small_vocabulary_model
    prompts = [[5, 6, 7, 8, 9, 10], [PAD, PAD, 11, 12, 13, 14]]  # the second left-padded
    input_ids = torch.tensor([prompts[i] for i in order])
    attention_mask = (input_ids != PAD).long()
    generation = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=20,
                                  pad_token_id=PAD, eos_token_id=EOS)  # fmt: skip
    outputs, computed = {}, {}
    paths = {"unshared": (False, False, False), "unshared, skipping": (False, False, True),
             "copied, skipping": (True, False, True), "cascade, skipping": (True, True, True)}  # fmt: skip
    for name, (share, cascade, skip) in paths.items():
        seen, hook = rows_computed(model)
        torch.manual_seed(3)
        with generating_with(model, model, share_prompts=share, cascade=cascade, skip_finished=skip):
            outputs[name] = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                           generation_config=generation)  # fmt: skip
        hook.remove()
        computed[name] = seen
    assert "forward" not in model.__dict__  # the class's forward is back
    for name in paths:
        assert torch.equal(outputs[name], outputs["unshared"]), name

    # from the completions: the step at which each row drew its end of sequence (the last step if none)
    completions = outputs["unshared"][:, input_ids.shape[1] :]
    steps = completions.shape[1]
    ends = [row.tolist().index(EOS) if EOS in row.tolist() else steps for row in completions]
    assert sum(end < steps - 1 for end in ends) >= 4  # the fixture ends rows early
    # every row at step 0, then at step s the rows that had not ended; the shared prefill first (2 prompts)
    decoding = [len(order)] + [max(1, sum(end >= s for end in ends)) for s in range(1, steps)]
    assert computed["unshared"] == [len(order)] * steps
    assert computed["unshared, skipping"] == decoding
    assert computed["copied, skipping"] == computed["cascade, skipping"] == [2, *decoding]


def test_an_instance_forward_is_wrapped_and_given_back(small_vocabulary_model):
    model = small_vocabulary_model
    calls = []

    def own_forward(*args, **kwargs):  # as TRL's fused output head sets one on the policy
        calls.append(1)
        return type(model).forward(model, *args, **kwargs)

    model.forward = own_forward
    input_ids = torch.tensor([[5, 6, 7, 8]] * 4)
    generation = GenerationConfig(do_sample=False, max_new_tokens=6, pad_token_id=PAD, eos_token_id=EOS)
    with generating_with(model, model, share_prompts=True):
        model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), generation_config=generation)
    assert model.__dict__["forward"] is own_forward and len(calls) >= 6


@pytest.mark.parametrize(
    "setting",
    [{"do_sample": True}, {"output_scores": True, "return_dict_in_generate": True}, {"eos_token_id": None}],
    ids=["tokens drawn by generate", "scores returned", "no end of sequence"],
)
def test_every_row_is_computed_where_skipping_cannot_apply(small_vocabulary_model, setting):
    model = small_vocabulary_model
    model.generation_config.eos_token_id = None
    config = GenerationConfig(**{"do_sample": False, "eos_token_id": EOS, **setting})
    kwargs = {"generation_config": config, "logits_processor": None}
    with skipping_finished_rows(model, rows=8, generate_kwargs=kwargs) as given:
        assert given is kwargs and "forward" not in model.__dict__


def test_a_merged_lora_policy_with_trls_output_head_skips_finished_rows_alike(small_vocabulary_model):
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    from rectune.training.rollouts import merged_for_sampling

    add_fused_lm_head(small_vocabulary_model)  # as GRPOTrainer does, before PEFT wraps the model
    policy = get_peft_model(small_vocabulary_model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 10]] * 4 + [[PAD, PAD, 11, 12, 13, 14]] * 4)
    generation = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=20,
                                  pad_token_id=PAD, eos_token_id=EOS)  # fmt: skip
    outputs, computed = {}, {}
    for skip in (False, True):
        seen, hook = rows_computed(policy.get_base_model())
        torch.manual_seed(5)
        with merged_for_sampling(policy), generating_with(policy, policy, share_prompts=True, skip_finished=skip):
            outputs[skip] = policy.generate(input_ids=input_ids, attention_mask=(input_ids != PAD).long(),
                                            generation_config=generation)  # fmt: skip
        hook.remove()
        computed[skip] = sum(seen)
    assert torch.equal(outputs[True], outputs[False])
    assert computed[True] < computed[False]
