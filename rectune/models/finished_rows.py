"""Decoding that stops computing the rows that have finished.

transformers' ``generate`` keeps every row of a batch in every decoding step until the last one ends:
a row past its end of sequence is fed a pad token, run through the whole model and given a pad token
again. A GRPO batch decodes until its longest completion ends, as does each batch of an evaluation, and
on this 2-core CPU a SmolLM2 decoding step costs about 80 ms plus 4.5 ms a row (after the experiment's
373-token prompts, measured), so rows that finished early carry much of a step's cost: the experiment's
completions average 67 of up to 96 tokens, and almost every GRPO batch has one that runs to 96.

:func:`skipping_finished_rows` leaves ``generate`` in charge (its logits processors, stopping criteria
and outputs) and changes only which rows the model computes: a last logits processor
(:class:`FinishedRows`) sees each step's chosen tokens and marks a row finished once it chose an end of
sequence, as ``generate``'s own end-of-sequence criterion does; from the next step the model's forward
runs on the unfinished rows only and hands ``generate`` zero logits for the others, whose tokens it
replaces with padding anyway. A plain cache (transformers' ``DynamicCache``) drops the finished rows; a
cache that keeps a group's prompt once (rectune/training/prefix_decoding.py) keeps every row and is told
which ones a forward computes. Every row still draws its uniform (rectune/training/inverse_cdf.py), so a
seeded run samples what it sampled before, up to float rounding that depends on a batch's size.

It needs tokens chosen greedily after the processors (greedy decoding, or inverse-CDF sampling) and one
of those two caches; elsewhere every row is decoded to the end, as before.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.cache_utils import DynamicLayer

ROW_INPUTS = ("input_ids", "attention_mask", "position_ids")  # a decoding forward's inputs with a row per sequence
CACHE_INPUTS = ("past_key_values", "cache")  # the forward's cache, by transformers' older name and its newer


class FinishedRows(LogitsProcessor):
    """The last logits processor of a greedy selection: leaves the scores as they are and records which rows
    have chosen one of ``eos_token_ids`` (``finished``), and the others (``unfinished``: None while none
    has finished)."""

    def __init__(self, eos_token_ids: torch.Tensor, rows: int):
        self.eos_token_ids = eos_token_ids
        self.finished = torch.zeros(rows, dtype=torch.bool)
        self.unfinished: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        chosen = scores.argmax(-1)  # what greedy selection picks, ties included
        # on the scores' device: a model spread over devices gives its logits on the last one
        self.finished = self.finished.to(chosen.device) | torch.isin(chosen, self.eos_token_ids.to(chosen.device))
        if self.finished.any():
            self.unfinished = (~self.finished).nonzero().squeeze(1)
        return scores


def effective_config(model_defaults: GenerationConfig, generate_kwargs: dict[str, Any]) -> GenerationConfig:
    """The configuration ``generate`` decodes with, merged as it merges it: the one given (else an empty one),
    the model's values where it leaves one unset, then the settings given as keywords."""
    given = generate_kwargs.get("generation_config")
    config = copy.deepcopy(given) if given is not None else GenerationConfig()
    config.update(**model_defaults.to_dict(), defaults_only=True, allow_custom_entries=True)
    config.update(**{key: value for key, value in generate_kwargs.items() if key != "generation_config"})
    return config


def end_of_sequence_ids(config: GenerationConfig) -> list[int]:
    """The token ids ``generate`` ends a row at under ``config``."""
    ids = config.eos_token_id
    if ids is None:
        return []
    return [ids] if isinstance(ids, int) else list(ids)


def _takes_a_subset(cache: object) -> bool:
    """Whether a forward can run on some rows of ``cache``: one that keeps every row and is told which are
    computed (``every_row``), or transformers' plain cache, whose rows can be dropped."""
    if hasattr(cache, "every_row"):
        return True
    return type(cache) is DynamicCache and all(type(layer) is DynamicLayer for layer in cache.layers)


def _row_forward(forward, tracker: FinishedRows):
    """``forward`` run on the unfinished rows, its logits widened back to every row (zeros for the finished)."""
    kept: list[torch.Tensor | None] = [None]  # the rows a plain cache still holds (None: all)

    @functools.wraps(forward)  # generate reads the forward's signature to decide what to pass (position ids)
    def forward_unfinished_rows(*args, **kwargs):
        unfinished = tracker.unfinished
        input_ids = kwargs.get("input_ids")
        rows = None if input_ids is None else input_ids.shape[0]
        cache = next((kwargs[key] for key in CACHE_INPUTS if kwargs.get(key) is not None), None)
        other_row_inputs = [
            key for key, value in kwargs.items()
            if key not in ROW_INPUTS and isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == rows
        ]  # fmt: skip
        if unfinished is None or args or rows is None or other_row_inputs or not _takes_a_subset(cache):
            return forward(*args, **kwargs)
        if len(unfinished) == 0:  # a step after the last row ended: one row keeps the cache in step
            unfinished = unfinished.new_zeros(1) if kept[0] is None else kept[0][:1]
        unfinished = unfinished.to(input_ids.device)
        for key in ROW_INPUTS:
            if isinstance(kwargs.get(key), torch.Tensor):
                kwargs[key] = kwargs[key][unfinished]
        if hasattr(cache, "every_row"):
            cache.rows = unfinished
        elif kept[0] is None or not torch.equal(kept[0], unfinished):
            selected = unfinished if kept[0] is None else torch.searchsorted(kept[0], unfinished)
            cache.batch_select_indices(selected.cpu())  # its layers may sit on several devices
            kept[0] = unfinished
        try:
            outputs = forward(**kwargs)
        finally:
            if hasattr(cache, "every_row"):
                cache.rows = None
        logits = outputs.logits.new_zeros((rows, *outputs.logits.shape[1:]))
        logits[unfinished.to(logits.device)] = outputs.logits
        outputs.logits = logits
        return outputs

    return forward_unfinished_rows


@contextmanager
def skipping_finished_rows(
    model: torch.nn.Module, rows: int, generate_kwargs: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """Within: ``model``'s decoder (a PEFT model's base model) computes the unfinished rows only; yields
    ``generate_kwargs`` with :class:`FinishedRows` appended to their logits processors, or unchanged where
    the tokens are drawn by ``generate`` itself (``do_sample``), a watermark moves the scores after the last
    processor, ``generate`` returns scores or logits (which the finished rows would lack), or nothing ends
    a row."""
    backbone = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = effective_config(backbone.generation_config, generate_kwargs)
    eos = end_of_sequence_ids(config)
    applies = (
        not (config.do_sample or config.output_scores or config.output_logits or config.watermarking_config)
        and eos and rows > 1
    )  # fmt: skip
    if not applies:
        yield generate_kwargs
        return
    tracker = FinishedRows(torch.tensor(eos), rows)
    processors = LogitsProcessorList([*(generate_kwargs.get("logits_processor") or []), tracker])
    had_own = "forward" in backbone.__dict__  # TRL's fused output head sets one on the policy
    own = backbone.__dict__.get("forward")
    backbone.forward = _row_forward(backbone.forward, tracker)
    try:
        yield {**generate_kwargs, "logits_processor": processors}
    finally:
        if had_own:
            backbone.forward = own
        else:
            del backbone.forward
