"""Each group's prompt encoded once: the same log-probabilities, losses, gradients and samples as TRL's rows."""

import itertools

import pytest
import torch

from rectune.training.shared_prefix import IGNORE, pack_shared_prefixes, prompt_groups

LOSS_TYPES = ["grpo", "dapo", "bnpo", "dr_grpo", "cispo", "sapo", "vespo", "luspo"]  # every one TRL 1.16 has


def test_rows_are_packed_by_prompt_by_hand():
    # rows 0 and 2 share prompt [5, 6, 7]; row 1's prompt [8, 9] is left-padded (0); completions right-padded
    prompt_ids = torch.tensor([[5, 6, 7], [0, 8, 9], [5, 6, 7]])
    prompt_mask = torch.tensor([[1, 1, 1], [0, 1, 1], [1, 1, 1]])
    completion_ids = torch.tensor([[20, 21, 0], [30, 31, 32], [40, 0, 0]])
    completion_mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    assert prompt_groups(prompt_ids, prompt_mask) == [[0, 2], [1]]
    packed = pack_shared_prefixes(prompt_ids, prompt_mask, completion_ids, completion_mask, pad_token_id=0)
    # group 0: prompt[:-1] = 5 6 | 7 20 (row 0: predicts 20 21) | 7 (row 2: predicts 40); group 1: 8 | 9 30 31
    assert packed.input_ids.tolist() == [[5, 6, 7, 20, 7], [8, 9, 30, 31, 0]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 2], [1, 2, 3, 4, 0]]  # the unshared rows' columns
    assert packed.shift_labels.tolist() == [[IGNORE, IGNORE, 20, 21, 40], [IGNORE, 30, 31, 32, IGNORE]]
    allowed = packed.allowed[:, 0].int().tolist()
    assert allowed[0] == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 1]]
    assert allowed[1] == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 1]]
    per_position = torch.arange(10.0).view(2, 5)  # a value per packed place, back in (rows, completion length)
    assert packed.unpack(per_position).tolist() == [[2.0, 3.0, 0.0], [6.0, 7.0, 8.0], [4.0, 0.0, 0.0]]


def test_rows_without_a_shared_prompt_or_in_another_layout_are_left_to_trl():
    ids, mask = torch.tensor([[5, 6], [7, 8]]), torch.ones(2, 2, dtype=torch.long)
    assert pack_shared_prefixes(ids, mask, ids, mask, 0) is None  # nothing shared: nothing saved
    right_padded = torch.tensor([[1, 0], [1, 0]])
    same = torch.tensor([[5, 6], [5, 6]])
    assert pack_shared_prefixes(same, right_padded, same, mask, 0) is None


def test_models_with_sliding_window_layers_keep_trls_rows():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    from rectune.training.shared_prefix import has_sliding_layers

    slides = has_sliding_layers
    assert not slides(LlamaConfig()) and not slides(Qwen2Config())  # Qwen2.5 ships with the window off
    assert slides(Qwen2Config(use_sliding_window=True, max_window_layers=0)) and slides(MistralConfig())


def grpo_trainer(model, data, out, targets=("q_proj", "v_proj"), **config):
    """RecTune's GRPO trainer (ReRec's reasoning-aware and Rank-GRPO's per-rank advantages on), in this process."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import GRPOConfig

    from rectune.training.rewards import resolve_rewards, rft_resources
    from rectune.training.shaped_trainer import ShapedGRPOTrainer
    from rectune.training.shaping import ShapingArguments
    from rectune.training.views import view_examples

    benchmark, resources = rft_resources(data / "train_rft.jsonl")
    names = ["ndcg_at_k", "from_candidates", "tests.grpo_rewards.length"]  # the length varies in every group
    rewards, _ = resolve_rewards(benchmark, names, resources)
    settings = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=24, temperature=1.0,
                    use_cpu=True, bf16=False, report_to=[], beta=0.0, seed=3, scale_rewards="group")  # fmt: skip
    trainer = ShapedGRPOTrainer(
        model=str(model), reward_funcs=rewards,
        train_dataset=Dataset.from_list(view_examples(data / "train_rft.jsonl")),
        args=GRPOConfig(output_dir=str(out), **{**settings, **config}),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=targets, lora_dropout=0.0),
        shaping=ShapingArguments(reasoning_aware_scale=0.7, rank_advantage=True), benchmark=benchmark,
        resources=resources,
    )  # fmt: skip
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by transformers' training loop, which is not run here
    return trainer


def batch_of(trainer):
    """A generated batch whose prompts differ in length (so some are left-padded), as TRL hands it to the loss."""
    torch.manual_seed(0)
    for batch in itertools.islice(trainer.get_train_dataloader(), 20):
        inputs = trainer._prepare_inputs(batch)
        if inputs["prompt_mask"].sum(1).unique().numel() > 1:
            break
    assert inputs["advantages"].dim() == 2 and inputs["advantages"].abs().sum() > 0  # per-token, not all zero
    return inputs


def loss_and_gradients(trainer, inputs, shared: bool):
    trainer.shared_prefix = shared
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in trainer.model.named_parameters() if p.requires_grad}
    return loss.detach(), grads


def assert_same_loss_and_gradients(trainer, inputs):
    packed = pack_shared_prefixes(inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"],
                                  inputs["completion_mask"], 0)  # fmt: skip
    assert packed is not None and len(packed.input_ids) < len(inputs["prompt_ids"])  # prompts are shared
    loss, grads = loss_and_gradients(trainer, inputs, shared=False)
    shared_loss, shared_grads = loss_and_gradients(trainer, inputs, shared=True)
    torch.testing.assert_close(shared_loss, loss, rtol=1e-5, atol=1e-7)
    assert grads.keys() == shared_grads.keys() and any(g.abs().sum() > 0 for g in grads.values())
    for name, grad in grads.items():
        scale = grad.abs().max().clamp(min=1e-8)
        assert (shared_grads[name] - grad).abs().max() <= 1e-4 * scale, name


@pytest.fixture(scope="module")
def trainer(tmp_path_factory, tiny_model, grounded_data):
    return grpo_trainer(tiny_model, grounded_data, tmp_path_factory.mktemp("rft"))


def test_the_shared_forward_gives_the_rows_log_probabilities_and_entropies(trainer):
    inputs = batch_of(trainer)
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    width = inputs["completion_ids"].shape[1]
    assert inputs["prompt_mask"].sum(1).unique().numel() > 1  # prompts of different lengths, left-padded
    assert (inputs["prompt_mask"] == 0).any()
    results = {}
    for shared in (False, True):
        trainer.shared_prefix = shared
        with torch.no_grad():  # batch_size 3: TRL's chunks cut the groups of 4
            results[shared] = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, width, batch_size=3, compute_entropy=True
            )
    for index in (0, 1):
        torch.testing.assert_close(results[True][index], results[False][index], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_loss_and_every_lora_gradient_equal_the_unshared_paths(trainer, loss_type):
    trainer.loss_type = loss_type
    inputs = batch_of(trainer)
    # a second iteration's ratios differ from 1, so clipping and the importance weights are exercised too
    inputs["old_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
        trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
        torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), inputs["completion_ids"].shape[1],
    )[0].detach() + 0.05 * torch.randn_like(inputs["completion_mask"], dtype=torch.float)  # fmt: skip
    assert_same_loss_and_gradients(trainer, inputs)


def test_a_group_split_across_micro_batches(tmp_path, tiny_model, grounded_data):
    # 4 rows a micro-batch, groups of 8: each micro-batch holds part of a group (and TRL shuffles the rows)
    trainer = grpo_trainer(tiny_model, grounded_data, tmp_path, per_device_train_batch_size=4, num_generations=8,
                           steps_per_generation=4)  # fmt: skip
    inputs = batch_of(trainer)
    assert inputs["completion_ids"].shape[0] == 4
    assert_same_loss_and_gradients(trainer, inputs)


@pytest.mark.parametrize("use_cache", [True, False])
def test_shared_prefill_samples_the_same_completions(tiny_model, use_cache):
    """use_cache off (MPT's configuration has it) decoded each step over the whole sequence beside the prefilled
    cache: other completions, logits 11 apart."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from rectune.training.rollouts import generating_with

    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model, padding_side="left")
    prompts = ["You are a movie recommender system.", "You are given a query from the user, about Heat (1995)."]
    batch = tokenizer([p for p in prompts for _ in range(4)], return_tensors="pt", padding=True)
    assert (batch["attention_mask"] == 0).any()  # one prompt left-padded
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=12,
                              pad_token_id=tokenizer.pad_token_id, use_cache=use_cache)  # fmt: skip
    outputs, calls = {}, {}
    for share in (False, True):
        calls[share] = []

        def record(_, args, kwargs, share=share):
            calls[share].append(tuple(kwargs["input_ids"].shape))

        hook = model.register_forward_pre_hook(record, with_kwargs=True)
        torch.manual_seed(11)
        with generating_with(model, model, share_prompts=share):
            outputs[share] = model.generate(**batch, generation_config=config, output_logits=True,
                                            return_dict_in_generate=True)  # fmt: skip
        hook.remove()
    assert torch.equal(outputs[True].sequences, outputs[False].sequences)
    for shared_logits, logits in zip(outputs[True].logits, outputs[False].logits, strict=True):
        torch.testing.assert_close(shared_logits, logits, rtol=1e-4, atol=1e-4)
    width = batch["input_ids"].shape[1]
    assert calls[False][0] == (8, width)  # every row prefilled
    assert calls[True][:2] == [(2, width - 1), (8, 1)]  # each prompt once, then every row's last prompt token
    assert config.use_cache is use_cache  # the caller's configuration is its own


def test_the_shared_prefills_cache_is_set_in_the_generation_config_it_is_given(tiny_model):
    """``use_cache`` given beside a generation config is what transformers deprecates (and warned of, once a run)."""
    from transformers import AutoModelForCausalLM, GenerationConfig

    from rectune.training.rollouts import generate_sharing_prompts

    model = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    ids, mask = torch.tensor([[5, 6, 7]] * 2), torch.ones(2, 3, dtype=torch.long)
    given = []
    for config in (GenerationConfig(use_cache=False, max_new_tokens=2), None):
        generate_sharing_prompts(model, lambda **kwargs: given.append(kwargs), input_ids=ids, attention_mask=mask,
                                 generation_config=config)  # fmt: skip
    with_config, without = given
    assert "use_cache" not in with_config and with_config["generation_config"].use_cache is True
    assert with_config["generation_config"].max_new_tokens == 2
    assert without["use_cache"] is True and without["generation_config"] is None


@pytest.mark.slow
def test_the_embedded_models_loss_and_gradients_equal_the_unshared_paths(tmp_path, grounded_data):
    from rectune.models.embedded import resolve_model_name

    trainer = grpo_trainer(resolve_model_name("embedded:smollm2"), grounded_data, tmp_path)
    inputs = batch_of(trainer)
    assert_same_loss_and_gradients(trainer, inputs)
