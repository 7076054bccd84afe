"""TRL's fused output head, tuned for CPUs: labelled positions only, in small tiles.

TRL computes training log-probabilities (SFT's loss, GRPO's policy and old log-probabilities) with
``add_fused_lm_head``: the hidden states go through the output layer in tiles, each folded into
log-probabilities, entropies and top-1 hits, so the ``(tokens, vocabulary)`` logits are never kept. On
CUDA, Triton kernels fold the tiles and only positions with a label are scored. Elsewhere PyTorch
operations fold them, and every position is scored, the prompt's included, so that compilers such as
Neuron's see fixed tile shapes; the tiles are 4,096 tokens by 32,768 words, 512 MB in fp32, which every
element-wise pass of the fold allocates afresh from the operating system.

On a CPU running eagerly neither choice pays. :func:`tune_cpu_lm_head` makes TRL score the labelled
positions only (TRL's own CUDA path) and, on a CPU, calls its kernel on slices of
:data:`TOKEN_TILE` tokens with :data:`VOCAB_TILE`-word tiles (8 MB in fp32). The values are the same
functions of the same inputs; only the order of fp32 sums within a tile changes. Other devices, and
Triton's kernels, are untouched. ``docs/measured-figures.md`` has the measured effect.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)

TOKEN_TILE = 256  # tokens a kernel call on a CPU
VOCAB_TILE = 8192  # words a tile on a CPU: 8 MB in fp32 at TOKEN_TILE, against TRL's 512 MB


class _CpuTiles:
    """Stands in for TRL's ``ChunkedLogProbFunction`` in its fused head: on a CPU, the same function applied
    to slices of :data:`TOKEN_TILE` tokens with :data:`VOCAB_TILE`-word tiles; elsewhere, the function."""

    def __init__(self, function: Any):
        self.function = function

    def apply(self, hidden: torch.Tensor, weight: torch.Tensor, bias: Any, targets: torch.Tensor, *args: Any):
        if hidden.device.type != "cpu" or hidden.shape[0] == 0:
            return self.function.apply(hidden, weight, bias, targets, *args)
        temperature, _, *rest = args  # TRL's vocabulary tile is replaced by VOCAB_TILE
        pieces = [
            self.function.apply(part, weight, bias, part_targets, temperature, VOCAB_TILE, *rest)
            for part, part_targets in zip(hidden.split(TOKEN_TILE), targets.split(TOKEN_TILE), strict=True)
        ]
        return tuple(None if fields[0] is None else torch.cat(fields) for fields in zip(*pieces, strict=True))


def _scores_labelled_positions(use_triton: Any) -> Any:
    def labelled_positions_only(device: torch.device) -> bool:
        return device.type == "cpu" or use_triton(device)

    labelled_positions_only.untuned = use_triton
    return labelled_positions_only


def tune_cpu_lm_head(tuned: bool = True) -> bool:
    """Tune TRL's fused head for CPUs (``tuned``) or give TRL's own back; False where this TRL has no such
    head (nothing is changed then). Process-wide and idempotent; calls on other devices are unchanged."""
    from trl.trainer import utils

    scorer, function = getattr(utils, "_use_triton", None), getattr(utils, "_ChunkedLogProbFunction", None)
    if scorer is None or function is None:
        log.info("this TRL's output head has no tiles to tune; it runs as TRL ships it")
        return False
    original_scorer = getattr(scorer, "untuned", scorer)
    original_function = function.function if isinstance(function, _CpuTiles) else function
    utils._use_triton = _scores_labelled_positions(original_scorer) if tuned else original_scorer
    utils._ChunkedLogProbFunction = _CpuTiles(original_function) if tuned else original_function
    return True
