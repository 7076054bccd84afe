"""GRPO rollouts with a LoRA policy, sampled from the merged weights, optionally in a lower precision.

TRL samples each step's completions from the policy as it trains: a PEFT model in train mode whose
LoRA layers compute ``dropout(x)·A·B`` beside every adapted projection, for every generated token.
Sampling needs only the function, and the merged weight ``W + s·B·A`` is the same function:
:func:`merged_for_sampling` merges the adapter into the base weights in place for the generation,
samples in eval mode (no dropout), then unmerges and restores the mode. Sampled tokens are drawn by
inverse CDF rather than ``torch.multinomial`` (rectune/training/inverse_cdf.py: the same distribution,
a sixth of a CPU decoding step less).

On CPU, decoding reads every weight once per token, so it is bound by memory traffic: sampling from a
bfloat16 copy of the merged weights (:class:`RolloutCopy`, ``rollout_dtype``) halves it. The copy is
refreshed from the merged policy before every generation, as vLLM's weights are in TRL's vLLM mode;
the log-probabilities GRPO trains on are still the policy's own, in its own precision. The mismatch
between the two distributions is what ``make bench-rollouts`` reports as KL.

Sharded parameters (DeepSpeed ZeRO-3, FSDP) cannot be merged in place: there TRL's path is kept.
The adapted layers' base weights are kept while sampling and put back after, bit for bit: unmerging
alone rounds them (in bfloat16, a drift that compounds step after step).
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from datasets import Dataset
from peft import PeftModel
from peft.tuners.lora import LoraLayer
from transformers import GenerationConfig, LlamaForCausalLM

from rectune.models.finished_rows import skipping_finished_rows
from rectune.models.generation import one_answer_a_prompt
from rectune.training.continuous_batching import size_cache_to_the_step
from rectune.training.cpu_precision import cpu_has_bfloat16
from rectune.training.inverse_cdf import generate_drawing_by_inverse_cdf
from rectune.training.prefix_decoding import SharedPrefixCache, can_share, decoding_shared_prefix
from rectune.training.shared_prefix import SharedPrefixGRPOTrainer

log = logging.getLogger(__name__)

# transformers' name for the key/value cache among a forward's outputs and generate's inputs
_CACHE = "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else "past_key_values"


@contextmanager
def merged_for_sampling(model: torch.nn.Module) -> Iterator[bool]:
    """Within: ``model``'s LoRA adapters merged and the model in eval mode (yields True); a model
    without a PEFT adapter is left as it is (yields False). After, the base weights are bitwise those
    before: PEFT's unmerge subtracts what its merge added, which in bfloat16 rounds each time, and the
    rounding compounds as the adapter moves (a tiny model's adapter moved at random for 500 steps changed 59 %
    of one adapted layer's base weights, by 0.5 % of their mean size on average and 10 % at most)."""
    if not isinstance(model, PeftModel):
        yield False
        return
    training = model.training
    bases = [layer.get_base_layer() for layer in model.modules() if isinstance(layer, LoraLayer)]
    merged = list({id(p): p for base in bases for p in base.parameters(recurse=False)}.values())  # weight, bias
    originals = [weight.detach().clone() for weight in merged]  # kept while sampling: the adapted layers' size
    model.merge_adapter()
    model.eval()
    try:
        yield True
    finally:
        model.unmerge_adapter()
        with torch.no_grad():
            for weight, original in zip(merged, originals, strict=True):
                weight.copy_(original)
        model.train(training)


def _plain_name(peft_name: str) -> str | None:
    """The name a parameter of a PEFT-wrapped model has once the adapter is merged and unloaded;
    None for the adapter's own weights and the originals that ``modules_to_save`` replaces."""
    if "lora_" in peft_name or ".original_module." in peft_name:
        return None
    return peft_name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")


def _first_rows(inverse: torch.Tensor, groups: int) -> torch.Tensor:
    """The first row of each group, given each row's group."""
    rows = torch.arange(len(inverse), device=inverse.device)
    return torch.full((groups,), len(inverse), device=inverse.device).scatter_reduce(0, inverse, rows, "amin")


@torch.no_grad()
def generate_sharing_prompts(
    model: torch.nn.Module, generate, *args, input_ids=None, attention_mask=None, cascade: bool = True, **kwargs
):
    """``generate(input_ids=..., attention_mask=..., **kwargs)`` with each distinct prompt of the batch
    prefilled once: one forward over the distinct prompts (all but their last token, at the positions
    ``generate`` gives them) fills a cache, and ``generate`` goes on from there, as if it had prefilled every
    row itself. Nothing is drawn during the shared prefill, so a seeded run draws the same numbers as an
    unshared one. While decoding, each prompt's keys and values stay once (``cascade`` and where
    :func:`~rectune.training.prefix_decoding.can_share` allows), else they are copied to every row holding
    that prompt."""
    if args or input_ids is None or attention_mask is None or input_ids.shape[1] < 2 or kwargs.get(_CACHE) is not None:
        return generate(*args, input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    keys = input_ids.masked_fill(attention_mask == 0, -1)
    distinct, inverse = torch.unique(keys, dim=0, return_inverse=True)
    if len(distinct) == len(input_ids):
        return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    first = _first_rows(inverse, len(distinct))
    prompts, mask = input_ids[first, :-1], attention_mask[first, :-1]
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)  # as generate derives them from the mask
    prefilled = model(input_ids=prompts, attention_mask=mask, position_ids=positions, use_cache=True)
    cache = prefilled[_CACHE]
    # a generation config with use_cache off (MPT's configuration has it) would decode every step over the whole
    # sequence again, next to the prefilled cache: each token's keys twice (logits 11 apart on the tiny model)
    continuing = _caching(kwargs)
    if cascade and can_share(model, inverse, len(distinct)):
        shared = SharedPrefixCache(cache, mask, inverse)
        with decoding_shared_prefix(model, shared):
            return generate(input_ids=input_ids, attention_mask=attention_mask, **{_CACHE: shared}, **continuing)
    cache.reorder_cache(inverse)  # distinct prompts' rows -> every row's
    return generate(input_ids=input_ids, attention_mask=attention_mask, **{_CACHE: cache}, **continuing)


def _caching(kwargs: dict) -> dict:
    """``generate``'s ``kwargs`` with the cache on: set in their generation config where they pass one (transformers
    deprecates a setting given beside one, and warns of it), else given as ``use_cache``."""
    config = kwargs.get("generation_config")
    if config is None:
        return {**kwargs, "use_cache": True}
    config = copy.deepcopy(config)
    config.use_cache = True
    return {**kwargs, "generation_config": config}


def generate_skipping_finished_rows(model: torch.nn.Module, generate, *args, **kwargs):
    """``generate(*args, **kwargs)`` with ``model`` computing only the rows that have not finished
    (rectune/models/finished_rows.py)."""
    input_ids = kwargs.get("input_ids")
    if args or input_ids is None:
        return generate(*args, **kwargs)
    with skipping_finished_rows(model, len(input_ids), kwargs) as kwargs:
        return generate(**kwargs)


@contextmanager
def generating_with(
    policy: torch.nn.Module,
    model: torch.nn.Module,
    share_prompts: bool = False,
    cascade: bool = True,
    skip_finished: bool = True,
) -> Iterator[None]:
    """Within: ``policy.generate`` generates with ``model`` (the policy itself or its :class:`RolloutCopy`'s
    model), sampled tokens drawn by inverse CDF (rectune/training/inverse_cdf.py), each distinct prompt
    prefilled once when ``share_prompts`` and kept once while decoding when ``cascade``
    (:func:`generate_sharing_prompts`), finished rows no longer computed when ``skip_finished``
    (:func:`generate_skipping_finished_rows`)."""
    generate = model.generate  # bound before the shadowing below: ``model`` may be ``policy``
    if share_prompts:
        generate = functools.partial(generate_sharing_prompts, model, generate, cascade=cascade)
    if skip_finished:
        generate = functools.partial(generate_skipping_finished_rows, model, generate)
    # TRL calls ``unwrapped_model.generate``: an instance attribute shadows the method for this call only
    policy.generate = functools.partial(generate_drawing_by_inverse_cdf, generate, model.generation_config)
    try:
        yield
    finally:
        del policy.generate


def _backbone(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose forward ``generate`` calls: a PEFT model's base model, else the model."""
    return model.get_base_model() if isinstance(model, PeftModel) else model


class RolloutCopy:
    """A copy of ``policy`` in ``dtype``, eval mode, without adapters, for sampling only: the base weights
    as they are now (merged, within :func:`merged_for_sampling`); :meth:`sync` refreshes them."""

    def __init__(self, policy: torch.nn.Module, dtype: torch.dtype):
        if isinstance(policy, PeftModel):
            self.model = copy.deepcopy(policy).unload()
            source = policy.get_base_model()
        else:
            self.model = copy.deepcopy(policy)
            source = policy
        # TRL's fused output head replaces the policy's ``forward`` with a function bound to the policy: the
        # copy would inherit it and run the policy's own weights. Samples need the class's forward only.
        self.model.__dict__.pop("forward", None)
        # sampled under no_grad, yet parameters that do not require grad made bfloat16 ``generate`` on CPU
        # ~20 % slower (torch 2.13, measured): keep them requiring it; nothing trains this copy
        self.model.to(dtype).eval().requires_grad_(True)
        targets = dict(self.model.named_parameters())
        plain_names = [(_plain_name(name), p) for name, p in source.named_parameters()]
        self._pairs = [(p, targets.pop(name)) for name, p in plain_names if name]
        if targets:  # a layout this mapping does not know: refuse rather than sample from stale weights
            raise ValueError(f"rollout_dtype: no policy weight maps to {sorted(targets)[:5]}")

    @torch.no_grad()
    def sync(self) -> None:
        """Copy the policy's current (merged) weights in, cast to this copy's dtype."""
        for source, target in self._pairs:
            target.copy_(source)


def compile_decoding(generation_config: GenerationConfig, max_cache_len: int | None = None) -> None:
    """Set ``generation_config`` (TRL's, which turns compiling off) to decode with a static cache and
    transformers' compiled forward: transformers compiles on a GPU only, where a step of eager decoding
    is mostly kernel launches. Its cache keeps the longest length so far and the step recompiles each time
    a longer prompt outgrows it; ``max_cache_len`` (the longest prompt's tokens and the completion's) sizes
    it once for the run."""
    generation_config.cache_implementation = generation_config.cache_implementation or "static"
    generation_config.disable_compile = False
    if max_cache_len is not None:
        generation_config.max_cache_len = max(generation_config.max_cache_len or 0, max_cache_len)


def longest_prompt_tokens(trainer: SharedPrefixGRPOTrainer, batch_size: int = 256) -> int | None:
    """Tokens in the longest prompt of ``trainer``'s training set, tokenized as TRL tokenizes prompts for
    generation; None where the set cannot be read ahead (a streamed one), prompts come with environments or
    the TRL at hand tokenizes them elsewhere (its ``_tokenize_prompts`` is TRL's own, not a public API)."""
    dataset, tokenize = trainer.train_dataset, getattr(trainer, "_tokenize_prompts", None)
    if not isinstance(dataset, Dataset) or "prompt" not in dataset.column_names or tokenize is None:
        return None
    if getattr(trainer, "environment_factories", None):
        return None
    batches = dataset.select_columns("prompt").iter(batch_size)
    return max(len(ids) for batch in batches for ids in tokenize(batch["prompt"])[0])


def engine_sampling(
    use_vllm: bool,
    continuous_batching: bool,
    merge_for_sampling: bool,
    rollout_dtype: str | None,
    compile_rollouts: bool = False,
) -> tuple[bool, str | None, bool, str | None]:
    """(merge_for_sampling, rollout_dtype, compile_rollouts, why any was dropped) under TRL's generation
    engine: vLLM samples from its own copy of the weights, into which TRL merges the adapter, so none of
    the three applies; continuous batching generates with the policy itself (merged, the faster), never
    with a copy, and from its own paged cache, which a static one cannot replace."""
    if use_vllm:
        asked = [name for name, on in (("merge_for_sampling", merge_for_sampling), ("rollout_dtype", rollout_dtype),
                                       ("compile_rollouts", compile_rollouts)) if on]  # fmt: skip
        why = f"vLLM generates from its own copy of the weights: {', '.join(asked)} off" if asked else None
        return False, None, False, why
    if continuous_batching:
        asked = [name for name, on in (("rollout_dtype", rollout_dtype), ("compile_rollouts", compile_rollouts)) if on]
        why = f"continuous batching generates with the policy itself: {', '.join(asked)} ignored" if asked else None
        return merge_for_sampling, None, False, why
    return merge_for_sampling, rollout_dtype, compile_rollouts, None


class RecTuneGRPOTrainer(SharedPrefixGRPOTrainer):
    """TRL's GRPOTrainer with RecTune's diagnostics, sampling from merged LoRA weights by inverse CDF when
    ``merge_for_sampling`` is on and the parameters are whole on each process, from a copy of them in
    ``rollout_dtype`` when that differs from the policy's."""

    def __init__(
        self,
        *args,
        merge_for_sampling: bool = True,
        rollout_dtype: str | None = None,
        compile_rollouts: bool = False,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        # generate takes what TRL's generation config leaves unset from the model's: beams or several sequences
        # a prompt there would break each group of completions
        ignored = one_answer_a_prompt(self.accelerator.unwrap_model(self.model))
        if ignored:
            log.warning("rollouts: the model's generation_config.json asks for %s; ignored", ", ".join(ignored))
        merge_for_sampling, rollout_dtype, compile_rollouts, dropped = engine_sampling(
            self.use_vllm, self.use_transformers_continuous_batching, merge_for_sampling, rollout_dtype,
            compile_rollouts,
        )  # fmt: skip
        if dropped:
            log.info("rollouts: %s", dropped)
        if self.use_transformers_continuous_batching and self.accelerator.device.type == "cpu":
            sized = size_cache_to_the_step(self.continuous_batching_config, self.args, longest_prompt_tokens(self))
            if sized:
                log.info("rollouts: %s", sized)
        if compile_rollouts:
            longest = longest_prompt_tokens(self)
            cache = longest + self.args.max_completion_length if longest else None
            compile_decoding(self.generation_config, cache)
            # generate takes a static cache or a prefilled one, not both: each row prefills its own prompt
            self.shared_prefix_rollouts = False
            sized = f" of {cache} tokens (the longest prompt's {longest} and max_completion_length)" if cache else ""
            log.info("rollouts: a static key/value cache%s, decoding step compiled by transformers on a GPU", sized)
        # the recipe's own cache (TRL builds no generation config where vLLM generates)
        elif not self.use_vllm and self.generation_config.cache_implementation and self.shared_prefix_rollouts:
            self.shared_prefix_rollouts = False  # generate takes it or a prefilled one, not both (a ValueError)
            log.info("rollouts: cache_implementation %r: each completion prefills its prompt itself",
                     self.generation_config.cache_implementation)  # fmt: skip
        sharded = self.is_deepspeed_enabled and self.accelerator.state.deepspeed_plugin.zero_stage == 3
        # a quantized base rounds each merge and unmerge: five moved a 4-bit tiny model's logits by 2.9
        quantized = getattr(self.accelerator.unwrap_model(self.model), "is_quantized", False)
        if merge_for_sampling and quantized:
            log.info("merge_for_sampling: off, the base is quantized (merging into it and back would round it)")
        self.merge_for_sampling = merge_for_sampling and not (sharded or self.is_fsdp_enabled or quantized)
        on_cpu = self.accelerator.device.type == "cpu"
        generating = self.merge_for_sampling and not self.use_transformers_continuous_batching  # RecTune's rollouts
        if rollout_dtype is None and generating and self.args.bf16 and on_cpu:
            rollout_dtype = "bfloat16"  # bf16 on a CPU keeps the weights in fp32 (cpu_precision): sample as a GPU would
            log.info("rollouts: sampled in bfloat16, as the run trains in bf16 (rollout_dtype: float32 keeps fp32)")
        self.rollout_dtype = getattr(torch, rollout_dtype) if rollout_dtype else None
        if self.rollout_dtype is not None and not self.merge_for_sampling:
            warnings.warn("rollout_dtype needs merge_for_sampling and whole (unsharded) weights: ignored", stacklevel=2)
            self.rollout_dtype = None
        if self.rollout_dtype == torch.bfloat16 and on_cpu and not cpu_has_bfloat16():
            log.warning("rollout_dtype: bfloat16 is ignored: this CPU has no bfloat16 instructions, where a bfloat16 "
                        "copy samples slower than the float32 policy")  # fmt: skip
            self.rollout_dtype = None
        self._rollout_copy: RolloutCopy | None = None
        self.shared_prefix_decoding = True  # off: each prompt copied into its rows' caches (make bench-grpo-step)
        self.skip_finished_rows = True  # off: every row decoded until the last ends (make bench-grpo-step)

    def _generate_single_turn(self, *args, **kwargs):
        policy = self.accelerator.unwrap_model(self.model)
        if not self.merge_for_sampling:
            with self.prefill_timed(_backbone(policy)):
                return super()._generate_single_turn(*args, **kwargs)
        with merged_for_sampling(policy):
            sampler = policy
            if self.rollout_dtype is not None and self.rollout_dtype != policy.dtype:
                if self._rollout_copy is None:
                    self._rollout_copy = RolloutCopy(policy, self.rollout_dtype)
                    log.info("rollouts: sampled from a %s copy of the merged policy, refreshed every generation",
                             str(self.rollout_dtype).removeprefix("torch."))  # fmt: skip
                self._rollout_copy.sync()
                sampler = self._rollout_copy.model
            sharing = generating_with(
                policy, sampler, self.shared_prefix_rollouts, self.shared_prefix_decoding, self.skip_finished_rows
            )
            with sharing, self.prefill_timed(_backbone(sampler)):
                return super()._generate_single_turn(*args, **kwargs)
