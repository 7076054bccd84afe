"""Attention over packed groups (rectune/training/shared_prefix.py) computed in parts, skipping the masked scores.

A packed group is ``prompt[:-1] | segment 1 | segment 2 | ...``; its 4-D mask lets the prompt see itself
causally and each segment see the prompt and its own earlier tokens. SDPA given that mask scores every
query against every key, so at the experiment's shape (373 prompt tokens, 8 segments of about 67) it
computes about four times the scores it keeps. Here the same attention is two calls a group:

* the prompt: causal attention over the prompts' columns (SDPA's ``is_causal``, which skips the blocks
  above the diagonal);
* the segments: each segment's queries against its group's prompt keys and its own keys, laid out as
  ``(segments, heads, longest segment, dim)`` with a lower-right causal mask.

Each query sees exactly the keys the mask gave it, so the outputs and gradients are the same function of
the inputs; only the order of fp32 sums changes. Positions that are padding in the packed layout attend
to nothing and give zeros: no real query sees them and they carry no label.

The GRPO trainer switches the model's attention to :data:`IMPLEMENTATION` (:func:`switched_attention`) for
its packed forward and, within a training step, over the loss's backward, whose activation checkpointing
recomputes each layer. Any call without a layout, or one this function cannot take as parts, goes to
transformers' SDPA unchanged, with SDPA's masks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.nn.functional import scaled_dot_product_attention
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

IMPLEMENTATION = "rectune_prefix_parts"
LAYOUT_KEY = "prefix_parts"  # the keyword that carries a batch's PrefixParts down to every attention call
UNSUPPORTED = ("softcap", "sliding_window", "s_aux", "position_bias")  # calls with these keep SDPA's mask


@dataclass
class GroupSegments:
    """One group's segments, gathered as ``(count, width)`` places; shorter ones padded with their first place."""

    group: int
    prompt_length: int  # the group's prompt[:-1] tokens, first in its sequence
    count: int
    width: int  # the longest segment
    mask: torch.Tensor  # (width, prompt_length + width) bool: the prompt, then the segment causally


@dataclass
class PrefixParts:
    """Where a packed batch's prompts and segments lie, and where each output position comes from."""

    prompt_width: int  # the longest prompt[:-1]: columns computed by the causal prompt call
    groups: list[GroupSegments]
    segment_places: torch.Tensor  # every group's (count * width) places, flat over (groups * length)
    source: torch.Tensor  # (groups * length,): the row of the stacked outputs each packed place takes

    @classmethod
    def build(
        cls, length: int, prompt_lengths: list[int], segments: list[list[tuple[int, int]]], device: torch.device
    ) -> PrefixParts:
        """``segments[g]``: ``(first place, length)`` of each segment of group ``g``, in order."""
        prompt_width = max(prompt_lengths)
        rows = len(prompt_lengths) * prompt_width  # the prompt call's outputs come first, then each group's
        source = torch.full((len(prompt_lengths), length), -1, dtype=torch.long)  # -1: the zero row, at the end
        groups, places = [], []
        for group, (prompt_length, spans) in enumerate(zip(prompt_lengths, segments, strict=True)):
            source[group, :prompt_length] = group * prompt_width + torch.arange(prompt_length)
            if not spans:
                continue
            width = max(n for _, n in spans)
            places += [group * length + first + (j if j < n else 0) for first, n in spans for j in range(width)]
            for number, (first, n) in enumerate(spans):
                source[group, first : first + n] = rows + number * width + torch.arange(n)
            mask = torch.ones(width, prompt_length + width, dtype=torch.bool).tril(prompt_length)
            groups.append(GroupSegments(group, prompt_length, len(spans), width, mask.to(device)))
            rows += len(spans) * width
        source[source < 0] = rows
        segment_places = torch.tensor(places, dtype=torch.long, device=device)
        return cls(prompt_width, groups, segment_places, source.view(-1).to(device))


def prefix_parts_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: ``(batch, heads, length, dim)`` in, ``(batch, length, heads, dim)``
    out, computed in parts where the call carries a :class:`PrefixParts`; SDPA with the mask otherwise."""
    parts = kwargs.pop(LAYOUT_KEY, None)
    plain = dropout > 0 or any(kwargs.get(name) is not None for name in UNSUPPORTED)
    if parts is None or plain or query.shape[2] != key.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    repeats = getattr(module, "num_key_value_groups", 1)
    batch, heads, length, dim = query.shape
    width = parts.prompt_width
    pieces = []
    if width:
        keys, values = (repeat_kv(t[:, :, :width], repeats) for t in (key, value))
        out = scaled_dot_product_attention(query[:, :, :width], keys, values, is_causal=True, scale=scaling)
        pieces.append(out.transpose(1, 2).reshape(batch * width, heads, dim))
    # one gather and one split for every group, and the prompts' keys unbound once: slicing a tensor per
    # group would give each slice's backward a zero-filled gradient of the whole tensor
    sizes = [seg.count * seg.width for seg in parts.groups]
    gathered = [
        t.transpose(1, 2).reshape(batch * length, t.shape[1], dim).index_select(0, parts.segment_places).split(sizes)
        for t in (query, key, value)
    ]  # fmt: skip
    prompt_keys, prompt_values = key[:, :, :width].unbind(0), value[:, :, :width].unbind(0)
    for seg, q, k, v in zip(parts.groups, *gathered, strict=True):

        def segments(t: torch.Tensor, seg: GroupSegments = seg) -> torch.Tensor:
            return t.view(seg.count, seg.width, -1, dim).transpose(1, 2)  # (count, heads, width, dim)

        def with_prompt(t: torch.Tensor, prompts: tuple, seg: GroupSegments = seg) -> torch.Tensor:
            prompt = prompts[seg.group][:, : seg.prompt_length].expand(seg.count, -1, -1, -1)
            return repeat_kv(torch.cat([prompt, segments(t)], dim=2), repeats)

        out = scaled_dot_product_attention(
            segments(q), with_prompt(k, prompt_keys), with_prompt(v, prompt_values), attn_mask=seg.mask, scale=scaling
        )
        pieces.append(out.transpose(1, 2).reshape(seg.count * seg.width, heads, dim))
    pieces.append(query.new_zeros(1, heads, dim))
    return torch.cat(pieces)[parts.source].view(batch, length, heads, dim), None


AttentionInterface.register(IMPLEMENTATION, prefix_parts_attention)
AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)  # a forward given a 2-D mask builds SDPA's


def attending_in_parts(config) -> bool:
    """Whether the model whose config this is is switched to the attention in parts (:func:`switched_attention`)."""
    return getattr(config, "_attn_implementation", None) == IMPLEMENTATION


def own_attention(config) -> str | None:
    """The attention implementation of the model whose config this is: SDPA's while switched to its parts."""
    return "sdpa" if attending_in_parts(config) else getattr(config, "_attn_implementation", None)


@contextmanager
def switched_attention(config, implementation: str = IMPLEMENTATION) -> Iterator[None]:
    """Within: the decoder whose config is (or holds) ``config`` attends with ``implementation``, a name in
    transformers' ``AttentionInterface``; its own implementation is given back after, also on an exception."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    before = text._attn_implementation
    text._attn_implementation = implementation
    try:
        yield
    finally:
        text._attn_implementation = before
