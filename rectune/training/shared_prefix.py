"""The GRPO policy's forward with each group's prompt encoded once (exact: same outputs, same gradients).

TRL scores a batch as rows ``[prompt, completion]``, one per completion, so a group of G completions
encodes its prompt G times. :func:`pack_shared_prefixes` turns the rows that share a prompt into one
sequence::

    prompt[:-1] | prompt[-1] c1[0] .. c1[n1-2] | prompt[-1] c2[0] .. c2[n2-2] | ...

with a 4-D attention mask in which the prompt's tokens see each other causally and each segment sees
the prompt and its own earlier tokens, and with position ids that are the unshared row's columns. Every
completion token is then predicted from the same keys and values at the same positions as in its own
row, so the log-probabilities and entropies are the same function of the weights; the prompt's
activations, used by every segment, receive the sum of the segments' gradients, which is what the G
copies received between them. This is Prefix Grouper's construction (arXiv 2506.05433) expressed as a
mask. The last prompt token opens each segment because it predicts that completion's first token and
a position carries one label.

Only rows laid out as TRL lays them out are packed: prompts left-padded, completions right-padded.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from rectune.training.diagnostics import DiagnosedGRPOTrainer
from rectune.training.packing_probe import packing_problem
from rectune.training.prefix_attention import (
    LAYOUT_KEY,
    PrefixParts,
    attending_in_parts,
    own_attention,
    switched_attention,
)

log = logging.getLogger(__name__)

IGNORE = -100  # the label of a position that predicts nothing (transformers' and TRL's convention)
ATTENTION_WITH_MASKS = ("sdpa", "eager")  # implementations that take an arbitrary 4-D mask


@dataclass
class PackedGroups:
    """One packed sequence per distinct prompt, and where each completion token's prediction sits in it."""

    input_ids: torch.Tensor  # (groups, length)
    position_ids: torch.Tensor  # (groups, length): the unshared rows' columns
    allowed: torch.Tensor  # (groups, 1, length, length) bool: query i may attend to key j
    shift_labels: torch.Tensor  # (groups, length): the token each position predicts, IGNORE where none
    source: torch.Tensor  # (rows * completion length,): flat packed index of each prediction, or the pad slot
    rows: int
    completion_length: int
    prompt_lengths: list[int]  # per group: its prompt[:-1] tokens, first in its sequence
    segments: list[list[tuple[int, int]]]  # per group: (first place, length) of each completion's segment

    def parts(self) -> PrefixParts:
        """The layout :func:`~rectune.training.prefix_attention.prefix_parts_attention` computes in parts."""
        length = self.input_ids.shape[1]
        return PrefixParts.build(length, self.prompt_lengths, self.segments, self.input_ids.device)

    def attention_mask(self, implementation: str, dtype: torch.dtype) -> torch.Tensor:
        """The mask in the form ``implementation`` takes: boolean for SDPA, additive for eager attention."""
        if implementation == "sdpa":
            return self.allowed
        additive = torch.zeros(self.allowed.shape, dtype=dtype, device=self.allowed.device)
        return additive.masked_fill(~self.allowed, torch.finfo(dtype).min)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """Per-position values of the packed sequences as ``(rows, completion length)``, 0 where a row has no
        completion token (as TRL's fused head gives where the label is ignored)."""
        flat = torch.nn.functional.pad(packed.reshape(-1), (0, 1))  # the last slot: the 0 for unused places
        return flat[self.source.to(packed.device)].view(self.rows, self.completion_length)


def _left_padded(mask: torch.Tensor) -> bool:
    lengths = mask.sum(1, keepdim=True)
    columns = torch.arange(mask.shape[1], device=mask.device)
    return bool(torch.equal(mask.bool(), columns >= mask.shape[1] - lengths))


def _right_padded(mask: torch.Tensor) -> bool:
    columns = torch.arange(mask.shape[1], device=mask.device)
    return bool(torch.equal(mask.bool(), columns < mask.sum(1, keepdim=True)))


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """The rows of each distinct prompt, groups in order of their first row: ``[[0, 2], [1]]``."""
    keys = prompt_ids.masked_fill(prompt_mask == 0, -1)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    groups: dict[int, list[int]] = {}
    for row, key in enumerate(inverse.tolist()):
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def pack_shared_prefixes(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    pad_token_id: int,
) -> PackedGroups | None:
    """The rows packed by prompt (module docstring); None where packing saves nothing (no prompt is shared)
    or the rows are not laid out as TRL lays them out."""
    if not (_left_padded(prompt_mask) and _right_padded(completion_mask)) or (prompt_mask.sum(1) == 0).any():
        return None
    groups = prompt_groups(prompt_ids, prompt_mask)
    if len(groups) == prompt_ids.shape[0]:
        return None
    rows, width = prompt_ids.shape
    completion_length = completion_ids.shape[1]
    prompt_lengths, lengths = prompt_mask.sum(1).tolist(), completion_mask.sum(1).tolist()
    device = prompt_ids.device
    sequences = []  # per group: (tokens, positions, segment ids, labels, [(row, first packed place, length)])
    for members in groups:
        first = members[0]
        start = width - prompt_lengths[first]
        tokens = [prompt_ids[first, start : width - 1]]
        positions = [torch.arange(start, width - 1, device=device)]
        segments = [torch.zeros(width - 1 - start, dtype=torch.long, device=device)]
        labels = [torch.full((width - 1 - start,), IGNORE, device=device)]
        places, place = [], width - 1 - start
        for number, row in enumerate(members, start=1):
            n = lengths[row]
            if n == 0:
                continue
            tokens.append(torch.cat([prompt_ids[row, -1:], completion_ids[row, : n - 1]]))
            positions.append(torch.arange(width - 1, width - 1 + n, device=device))
            segments.append(torch.full((n,), number, device=device))
            labels.append(completion_ids[row, :n])
            places.append((row, place, n))
            place += n
        sequences.append((*(torch.cat(parts) for parts in (tokens, positions, segments, labels)), places))
    length = max(len(tokens) for tokens, *_ in sequences)
    input_ids = torch.full((len(groups), length), pad_token_id, dtype=prompt_ids.dtype, device=device)
    position_ids = torch.zeros((len(groups), length), dtype=torch.long, device=device)
    segment_ids = torch.full((len(groups), length), -1, dtype=torch.long, device=device)  # -1: padding
    shift_labels = torch.full((len(groups), length), IGNORE, dtype=completion_ids.dtype, device=device)
    source = torch.full((rows * completion_length,), len(groups) * length, dtype=torch.long)  # the pad slot
    for index, (tokens, positions, segments, labels, places) in enumerate(sequences):
        size = len(tokens)
        input_ids[index, :size], position_ids[index, :size] = tokens, positions
        segment_ids[index, :size], shift_labels[index, :size] = segments, labels
        for row, place, n in places:
            source[row * completion_length : row * completion_length + n] = torch.arange(n) + index * length + place
    prompt_lengths = [len(sequence[0]) - sum(n for *_, n in sequence[4]) for sequence in sequences]
    segment_places = [[(place, n) for _, place, n in sequence[4]] for sequence in sequences]
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    # a query sees earlier keys of its own segment and of the prompt (segment 0); padding sees only
    # padding and the prompt, so that no row of the mask is empty
    same = (segment_ids[:, :, None] == segment_ids[:, None, :]) | (segment_ids[:, None, :] == 0)
    allowed = (causal & same).unsqueeze(1)
    return PackedGroups(
        input_ids, position_ids, allowed, shift_labels, source, rows, completion_length, prompt_lengths, segment_places
    )


def has_sliding_layers(config) -> bool:
    """Whether some attention layer sees a sliding window only: one 4-D mask cannot say that to it."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None:
        return "sliding_attention" in layer_types
    return bool(getattr(text, "sliding_window", None)) and getattr(text, "use_sliding_window", True) is not False


class SharedPrefixGRPOTrainer(DiagnosedGRPOTrainer):
    """TRL's GRPOTrainer whose policy (and reference) forward packs each chunk's rows by prompt
    (:func:`pack_shared_prefixes`) when ``shared_prefix`` is on and the model's attention takes a 4-D mask;
    TRL's forward otherwise, and for inputs this packing does not cover (images, MoE router losses).
    ``shared_prefix_rollouts`` tells the rollouts (rectune/training/rollouts.py) to prefill each prompt once."""

    def __init__(self, *args, shared_prefix: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.shared_prefix_rollouts = shared_prefix  # the rollouts' prefill shares any attention's cache
        self.prefix_attention_in_parts = True  # off: the packed mask in one SDPA call (make bench-grpo-step)
        config = self.accelerator.unwrap_model(self.model).config
        implementation = own_attention(config)
        self.shared_prefix = shared_prefix and implementation in ATTENTION_WITH_MASKS and not has_sliding_layers(config)
        if shared_prefix and not self.shared_prefix:
            needs = f"SDPA or eager attention without sliding windows, not {implementation}"
            log.info("shared_prefix: the loss keeps TRL's rows (a 4-D mask needs %s)", needs)
        self.packing_probed = False  # whether packing_probe.py has checked the model (at the first packed forward)

    def probe_packing(self, model) -> None:
        """Check, once a run, that packing gives ``model``'s own log-probabilities (packing_probe.py); where it
        does not, the loss keeps TRL's rows, with a log line."""
        self.packing_probed = True
        problem = packing_problem(self, model)
        if problem:
            self.shared_prefix = False
            log.warning("shared_prefix: the loss keeps TRL's rows: packing is not exact for %s: %s",
                        self.accelerator.unwrap_model(model).config.name_or_path, problem)  # fmt: skip

    def packed_log_probs(self, model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
        """The completions' log-probabilities (rows as TRL lays them out) from one packed forward, as the loss's."""
        pad = self._tokenizer.pad_token_id
        packed = pack_shared_prefixes(prompt_ids, prompt_mask, completion_ids, completion_mask, pad)
        return self._packed_logps(model, packed, compute_entropy=False)[0]

    def attends_in_parts(self, model) -> bool:
        """Whether ``model``'s packed forward computes SDPA's attention in parts (prefix_attention.py)."""
        config = self.accelerator.unwrap_model(model).config
        return self.shared_prefix and self.prefix_attention_in_parts and own_attention(config) == "sdpa"

    def step_attention(self, model) -> AbstractContextManager:
        """The attention a training step's loss and its backward go through: in parts where the model takes them.

        Held over the backward as well as the forward: under activation checkpointing (transformers' or
        FSDP's) the backward recomputes each layer, which must attend as its forward did."""
        held = self.attends_in_parts(model)
        return switched_attention(self.accelerator.unwrap_model(model).config) if held else nullcontext()

    def training_step(self, model, inputs, num_items_in_batch):
        with self.step_attention(model):
            return super().training_step(model, inputs, num_items_in_batch)

    def _prepare_inputs(self, generation_batch):
        # rollouts and their scoring attend with the model's own implementation, also within a training step
        config = self.accelerator.unwrap_model(self.model).config
        with switched_attention(config, "sdpa") if attending_in_parts(config) else nullcontext():
            return super()._prepare_inputs(generation_batch)

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **extra_inputs,
    ):
        if not self.shared_prefix or compute_aux_loss or any(value is not None for value in extra_inputs.values()):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **extra_inputs,
            )  # fmt: skip
        if not self.packing_probed:
            self.probe_packing(model)
            if not self.shared_prefix:
                return self._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                    **extra_inputs,
                )  # fmt: skip
        batch_size = batch_size or input_ids.size(0)  # TRL's chunks: the same rows, each packed on its own
        all_logps, all_entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            split = ids.size(1) - logits_to_keep
            packed = pack_shared_prefixes(
                ids[:, :split], mask[:, :split], ids[:, split:], mask[:, split:], self._tokenizer.pad_token_id
            )
            if packed is None:
                logps, entropies, _ = super()._get_per_token_logps_and_entropies(
                    model, ids, mask, logits_to_keep, compute_entropy=compute_entropy
                )
            else:
                logps, entropies = self._packed_logps(model, packed, compute_entropy)
            all_logps.append(logps)
            all_entropies.append(entropies)
        entropies = torch.cat(all_entropies, dim=0) if compute_entropy else None
        return torch.cat(all_logps, dim=0), entropies, None

    def _packed_logps(self, model, packed: PackedGroups, compute_entropy: bool):
        unwrapped = self.accelerator.unwrap_model(model)
        dtype = next(model.parameters()).dtype
        # outside a training step a backward may come after this call's switch is undone; under activation
        # checkpointing its recomputation would then attend otherwise and save other tensors, which torch refuses
        held = attending_in_parts(unwrapped.config)  # by the training step, over its backward
        recomputed_apart = (
            not held and torch.is_grad_enabled() and getattr(unwrapped, "is_activation_checkpointing", False)
        )
        in_parts = self.attends_in_parts(model) and not recomputed_apart
        layout = {LAYOUT_KEY: packed.parts()} if in_parts else {}
        with self.accelerator.autocast(), switched_attention(unwrapped.config) if in_parts else nullcontext():
            outputs = model(
                input_ids=packed.input_ids,
                attention_mask=packed.attention_mask(own_attention(unwrapped.config), dtype),
                position_ids=packed.position_ids,
                shift_labels=packed.shift_labels,
                fused_lm_head=True,
                **layout,
            )
        entropies = packed.unpack(outputs.entropy) if compute_entropy else None
        return packed.unpack(outputs.log_probs), entropies
