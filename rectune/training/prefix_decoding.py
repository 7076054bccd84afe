"""Decoding a group's completions with its prompt's keys and values kept once (cascade attention).

GRPO samples ``num_generations`` completions of each prompt. After the shared prefill
(:func:`rectune.training.rollouts.generate_sharing_prompts`) a plain cache holds a copy of the prompt's
keys and values in every row, and every decoding step reads all of them: on this 2-core CPU, 64 rows of
SmolLM2-135M decode a token in about twice the time after a 344-token prompt (the experiment's) as
after a 16-token one. Here each distinct prompt's keys and values stay once (:class:`SharedPrefixCache`);
a row's cache holds only the tokens it generates, and a step's attention (:func:`shared_prefix_attention`)
scores each query against its prompt's keys, one read per group, and against its own, then takes one
softmax over both: the same attention as SDPA's over the copied cache, its sums taken in another order.

It applies on CPUs, to Llama, Qwen2 and Qwen3 models without sliding-window layers, and to batches in
which every distinct prompt has the same number of rows (GRPO's); elsewhere the caller copies the
prompt into every row (:func:`can_share` says why GPUs keep the copies).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from rectune.training.prefix_attention import switched_attention
from rectune.training.shared_prefix import has_sliding_layers

ATTENTION = "rectune_shared_prefix"
MODEL_TYPES = ("llama", "qwen2", "qwen3")

_ACTIVE: contextvars.ContextVar[SharedPrefixCache | None] = contextvars.ContextVar("shared_prefix", default=None)


class SharedPrefixLayer(DynamicLayer):
    """One layer's cache: the prompts' keys and values once per distinct prompt (``prefix_keys``,
    ``prefix_values``: groups x heads x prompt x dim) and each row's generated tokens (``keys``, ``values``,
    which ``update`` appends to and returns: the prompt's are read by the attention)."""

    def __init__(self, prefix_keys: torch.Tensor, prefix_values: torch.Tensor):
        super().__init__()
        self.prefix_keys, self.prefix_values = prefix_keys, prefix_values

    def get_seq_length(self) -> int:
        return self.prefix_keys.shape[-2] + super().get_seq_length()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise NotImplementedError("a shared-prefix cache decodes sampled rows, not beams")

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("a shared-prefix cache cannot be cropped")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("a shared-prefix cache keeps all its rows")


class SharedPrefixCache(Cache):
    """A cache for rows that share prompts: ``prefilled`` holds one row per distinct prompt (their
    ``prefix_mask``, groups x prompt tokens, marks the padding), ``inverse`` names each row's prompt, and
    every prompt has the same number of rows. While ``rows`` names some rows
    (rectune/models/finished_rows.py), a forward computes those only: their new keys and values are
    written to their places among all rows' (the others get zeros, never attended to)."""

    def __init__(self, prefilled: Cache, prefix_mask: torch.Tensor, inverse: torch.Tensor):
        layers = [SharedPrefixLayer(layer.keys, layer.values) for layer in prefilled.layers]
        super().__init__(layers=layers)
        self.prefix_mask = prefix_mask.bool()
        self.groups = prefix_mask.shape[0]
        self.rows_per_group = len(inverse) // self.groups
        self.rows: torch.Tensor | None = None  # the rows a forward computes; None: all
        order = torch.sort(inverse, stable=True).indices  # rows, group by group
        grouped = bool(torch.equal(order, torch.arange(len(inverse), device=inverse.device)))
        self.order = None if grouped else order  # GRPO's rows already come group by group
        self.unorder = None if grouped else torch.argsort(order)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        return super().update(self.every_row(key_states), self.every_row(value_states), layer_idx, *args, **kwargs)

    def every_row(self, computed: torch.Tensor) -> torch.Tensor:
        """Values of the computed rows (``rows``) placed among all rows, zeros for the others."""
        if self.rows is None:
            return computed
        placed = computed.new_zeros((self.groups * self.rows_per_group, *computed.shape[1:]))
        placed[self.rows] = computed
        return placed

    def by_group(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows (batch first) -> groups x rows per group x ..."""
        rows = rows if self.order is None else rows[self.order]
        return rows.reshape(self.groups, self.rows_per_group, *rows.shape[1:])

    def by_row(self, grouped: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`by_group`."""
        rows = grouped.reshape(self.groups * self.rows_per_group, *grouped.shape[2:])
        return rows if self.unorder is None else rows[self.unorder]


def can_share(model: torch.nn.Module, inverse: torch.Tensor, groups: int) -> bool:
    """Whether :func:`decoding_shared_prefix` applies: rows on a CPU, a model of a known kind without
    sliding-window layers, every distinct prompt in the same number of rows. A GPU reads the copies in a
    fraction of the time its eager decoding step spends launching kernels, to which this attention's
    dozen small operations would add: there the copied cache stays until a GPU measures otherwise."""
    config = model.config.get_text_config(decoder=True)
    if inverse.device.type != "cpu" or config.model_type not in MODEL_TYPES or has_sliding_layers(config):
        return False
    counts = torch.bincount(inverse, minlength=groups)
    return bool((counts == counts[0]).all())


@contextmanager
def decoding_shared_prefix(model: torch.nn.Module, cache: SharedPrefixCache) -> Iterator[None]:
    """Within: ``model`` attends with :func:`shared_prefix_attention` over ``cache``."""
    token = _ACTIVE.set(cache)
    try:
        with switched_attention(model.config, ATTENTION):
            yield
    finally:
        _ACTIVE.reset(token)


def shared_prefix_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Attention of ``query`` (rows x heads x new tokens x dim) over the active cache's prompt keys of its
    row's group and ``key``/``value``, the row's own tokens; the output as SDPA's (rows x new tokens x heads x
    dim). The mask is built here: a prompt's padding from the cache, causal among the new tokens."""
    cache = _ACTIVE.get()
    if cache is None:  # a forward outside the shared decoding (none is expected): the usual attention
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    layer = cache.layers[module.layer_idx]
    computed = cache.rows
    query = cache.every_row(query)
    rows, heads, new, dim = query.shape
    kv_heads, own = key.shape[1], key.shape[2]
    scale = dim**-0.5 if scaling is None else scaling
    packed = query.reshape(rows, kv_heads, heads // kv_heads * new, dim)  # a key head's queries together

    grouped = cache.by_group(packed).transpose(1, 2).flatten(2, 3)  # groups x kv heads x queries x dim
    prompt_scores = grouped @ layer.prefix_keys.transpose(-1, -2) * scale
    prompt_scores = prompt_scores.masked_fill(~cache.prefix_mask[:, None, None, :], float("-inf"))
    prompt_scores = cache.by_row(prompt_scores.unflatten(2, (cache.rows_per_group, -1)).transpose(1, 2))
    own_scores = packed @ key.transpose(-1, -2) * scale  # rows x kv heads x queries x own tokens
    if new > 1:  # query i sees own tokens up to its own position
        seen = torch.ones(new, own, dtype=torch.bool, device=query.device).tril(own - new)
        own_scores = own_scores.masked_fill(~seen.repeat(heads // kv_heads, 1), float("-inf"))

    weights = torch.cat([prompt_scores, own_scores], dim=-1).softmax(dim=-1, dtype=torch.float32).to(query.dtype)
    prompt_weights, own_weights = weights.split([prompt_scores.shape[-1], own], dim=-1)
    prompt_weights = cache.by_group(prompt_weights).transpose(1, 2).flatten(2, 3)
    from_prompt = prompt_weights @ layer.prefix_values  # groups x kv heads x queries x dim
    output = cache.by_row(from_prompt.unflatten(2, (cache.rows_per_group, -1)).transpose(1, 2))
    output = (output + own_weights @ value).reshape(rows, heads, new, dim)
    if computed is not None:
        output = output[computed]
    return output.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, shared_prefix_attention)
