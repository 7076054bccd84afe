"""GRPO rollouts with a LoRA policy, sampled from the merged weights.

TRL samples each step's completions from the policy as it trains: a PEFT model in train mode whose
LoRA layers compute ``dropout(x)·A·B`` beside every adapted projection, for every generated token.
Sampling needs only the function, and the merged weight ``W + s·B·A`` is the same function:
:func:`merged_for_sampling` merges the adapter into the base weights in place for the generation,
samples in eval mode (no dropout), then unmerges and restores the mode. The merge costs one small
matrix product per adapted layer per step; ``make bench-rollouts`` measures what it saves.

Sharded parameters (DeepSpeed ZeRO-3, FSDP) cannot be merged in place: there TRL's path is kept.
Unmerging subtracts what merging added, so the frozen base weights carry float rounding (about
1e-7 relative per step), never a drift of the trained adapter.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from peft import PeftModel

from rectune.training.diagnostics import DiagnosedGRPOTrainer


@contextmanager
def merged_for_sampling(model: torch.nn.Module) -> Iterator[bool]:
    """Within: ``model``'s LoRA adapters merged and the model in eval mode (yields True); a model
    without a PEFT adapter is left as it is (yields False)."""
    if not isinstance(model, PeftModel):
        yield False
        return
    training = model.training
    model.merge_adapter()
    model.eval()
    try:
        yield True
    finally:
        model.unmerge_adapter()
        model.train(training)


class RecTuneGRPOTrainer(DiagnosedGRPOTrainer):
    """TRL's GRPOTrainer with RecTune's diagnostics, sampling from merged LoRA weights when
    ``merge_for_sampling`` is on and the parameters are whole on each process."""

    def __init__(self, *args, merge_for_sampling: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        sharded = self.is_deepspeed_enabled and self.accelerator.state.deepspeed_plugin.zero_stage == 3
        self.merge_for_sampling = merge_for_sampling and not (sharded or self.is_fsdp_enabled)

    def _generate_single_turn(self, *args, **kwargs):
        if not self.merge_for_sampling:
            return super()._generate_single_turn(*args, **kwargs)
        with merged_for_sampling(self.accelerator.unwrap_model(self.model)):
            return super()._generate_single_turn(*args, **kwargs)
