"""Decoding that stops computing the rows that have finished.

transformers' ``generate`` keeps every row of a batch in every decoding step until the last one ends:
a row past its end of sequence is fed a pad token, run through the whole model and given a pad token
again. A GRPO batch decodes until its longest completion ends, and on this 2-core CPU a SmolLM2 decoding
step costs about 80 ms plus 4.5 ms a row (64 rows after the experiment's 373-token prompts, measured),
so rows that finished early carry most of a step's cost: the experiment's completions average 67 of up
to 96 tokens, and almost every batch has one that runs to 96.

:func:`skipping_finished_rows` leaves ``generate`` in charge (its logits processors, stopping criteria
and outputs) and changes only which rows the model computes: a last logits processor
(:class:`FinishedRows`) sees each step's chosen tokens and marks a row finished once it chose an end of
sequence, as ``generate``'s own end-of-sequence criterion does; from the next step the model's forward
runs on the unfinished rows only and hands ``generate`` zero logits for the others, whose tokens it
replaces with padding anyway. Every row still draws its uniform (rectune/training/inverse_cdf.py), so a
seeded run samples the tokens it sampled before.

It needs tokens chosen greedily after the processors (inverse-CDF sampling or greedy decoding) and a
cache that takes a subset of its rows (:class:`~rectune.training.prefix_decoding.SharedPrefixCache`);
elsewhere every row is decoded to the end, as before.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from rectune.training.prefix_decoding import SharedPrefixCache

ROW_INPUTS = ("input_ids", "attention_mask", "position_ids")  # a decoding forward's inputs with a row per sequence


class FinishedRows(LogitsProcessor):
    """The last logits processor of a greedy selection: leaves the scores as they are and records which rows
    have chosen one of ``eos_token_ids`` (``finished``), and the others (``unfinished``: None while none
    has finished)."""

    def __init__(self, eos_token_ids: torch.Tensor, rows: int):
        self.eos_token_ids = eos_token_ids
        self.finished = torch.zeros(rows, dtype=torch.bool, device=eos_token_ids.device)
        self.unfinished: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        chosen = scores.argmax(-1)  # what greedy selection picks, ties included
        self.finished |= torch.isin(chosen, self.eos_token_ids.to(chosen.device))
        if self.finished.any():
            self.unfinished = (~self.finished).nonzero().squeeze(1)
        return scores


def end_of_sequence_ids(generation_config: GenerationConfig, model_defaults: GenerationConfig) -> list[int]:
    """The token ids ``generate`` ends a row at: the given configuration's, else the model's."""
    ids = generation_config.eos_token_id
    if ids is None:
        ids = model_defaults.eos_token_id
    if ids is None:
        return []
    return [ids] if isinstance(ids, int) else list(ids)


def _row_forward(forward, cache: SharedPrefixCache, tracker: FinishedRows):
    """``forward`` run on the unfinished rows, its logits widened back to every row (zeros for the finished)."""

    @functools.wraps(forward)  # generate reads the forward's signature to decide what to pass (position ids)
    def forward_unfinished_rows(*args, **kwargs):
        unfinished = tracker.unfinished
        input_ids = kwargs.get("input_ids")
        rows = None if input_ids is None else input_ids.shape[0]
        other_row_inputs = [
            key for key, value in kwargs.items()
            if key not in ROW_INPUTS and isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == rows
        ]  # fmt: skip
        if unfinished is None or args or rows is None or other_row_inputs:
            return forward(*args, **kwargs)
        if len(unfinished) == 0:  # a step after the last row ended: one row keeps the cache's length in step
            unfinished = unfinished.new_zeros(1)
        for key in ROW_INPUTS:
            if isinstance(kwargs.get(key), torch.Tensor):
                kwargs[key] = kwargs[key][unfinished]
        cache.rows = unfinished
        try:
            outputs = forward(**kwargs)
        finally:
            cache.rows = None
        logits = outputs.logits.new_zeros((rows, *outputs.logits.shape[1:]))
        logits[unfinished] = outputs.logits
        outputs.logits = logits
        return outputs

    return forward_unfinished_rows


@contextmanager
def skipping_finished_rows(
    backbone: torch.nn.Module, cache: SharedPrefixCache, rows: int, generate_kwargs: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """Within: ``backbone`` (the module whose forward ``generate`` calls) computes the unfinished rows only;
    yields ``generate_kwargs`` with :class:`FinishedRows` appended to their logits processors, or unchanged
    where the tokens are drawn by ``generate`` itself (``do_sample``), a watermark moves the scores after the
    last processor, ``generate`` returns scores or logits (which the finished rows would lack), or nothing
    ends a row."""
    config, defaults = generate_kwargs.get("generation_config"), backbone.generation_config
    eos = end_of_sequence_ids(config, defaults) if config is not None else []
    applies = (
        config is not None and not (config.do_sample or config.output_scores or config.output_logits)
        and not (config.watermarking_config or defaults.watermarking_config) and eos and rows > 1
    )  # fmt: skip
    if not applies:
        yield generate_kwargs
        return
    device = next(backbone.parameters()).device
    tracker = FinishedRows(torch.tensor(eos, device=device), rows)
    processors = LogitsProcessorList([*(generate_kwargs.get("logits_processor") or []), tracker])
    had_own = "forward" in backbone.__dict__  # TRL's fused output head sets one on the policy
    own = backbone.__dict__.get("forward")
    backbone.forward = _row_forward(backbone.forward, cache, tracker)
    try:
        yield {**generate_kwargs, "logits_processor": processors}
    finally:
        if had_own:
            backbone.forward = own
        else:
            del backbone.forward
