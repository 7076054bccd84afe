"""Whether packing a group's rows into one sequence (shared_prefix.py) gives this model's log-probabilities.

Packing is exact for a model whose every layer attends through the 4-D mask it is given and whose tokens are
placed by ``position_ids``. Many are not: state-space and linear-attention layers (Jamba's, Qwen3-Next's)
carry one completion's tokens into the next, ALiBi models (MPT) place tokens by their index, OPT counts a
left-padded row's places from its first token, and BLOOM's, Falcon's and Mamba's forwards raise on the
packed inputs. GRPO trained on such packed log-probabilities without a word (0.3 nats off on a tiny OPT).
Three checks decide it, once a run, on a few tokens in eval mode, each exact in any dtype:

* a completion's log-probabilities stay the same, bit for bit, when the other completion of its group
  changes (a layer that does not attend through the mask lets it through);
* the model's logits change when its ``position_ids`` are shifted (a model placing tokens by their index
  would give every packed completion but the first the wrong places);
* a left-padded row (as TRL lays out its rows) gives the same logits with ``position_ids`` counting from
  its first column, which the packed rows are given, as without (OPT counts from the first token).
"""

from __future__ import annotations

from typing import Any

import torch

PROMPT, OTHER, OWN = 12, 16, 4  # the probe's tokens: the prompt, the completion that changes, the one compared


def packing_problem(trainer: Any, model: torch.nn.Module) -> str | None:
    """Why packing is not exact for ``model`` (its packed forward raising, or a check above failing), or None.
    ``trainer`` is the GRPO trainer whose packed forward (``packed_log_probs``) is probed."""
    unwrapped = trainer.accelerator.unwrap_model(model)
    vocabulary = unwrapped.get_input_embeddings().num_embeddings
    device = next(unwrapped.parameters()).device

    def tokens(first: int, count: int) -> torch.Tensor:
        return torch.arange(first, first + count, device=device) % vocabulary

    prompt, own = tokens(1, PROMPT), tokens(1 + PROMPT + 2 * OTHER, OWN)
    ids = torch.cat([prompt, own]).unsqueeze(0)
    padded = torch.cat([torch.full((1, OWN), trainer._tokenizer.pad_token_id or 0, device=device), ids], 1)
    mask = (torch.arange(padded.shape[1], device=device) >= OWN).long().unsqueeze(0)  # left-padded, as TRL's rows
    columns = torch.arange(padded.shape[1], device=device).unsqueeze(0)
    places = columns[:, : ids.shape[1]]
    training = unwrapped.training
    unwrapped.eval()  # dropout (GPT-2's, OPT's) would make any two forwards differ
    try:
        with torch.no_grad():
            first = _own_logps(trainer, model, prompt, tokens(1 + PROMPT, OTHER), own)
            second = _own_logps(trainer, model, prompt, tokens(1 + PROMPT + OTHER, OTHER), own)
            placed, shifted = (unwrapped(input_ids=ids, position_ids=at).logits for at in (places, places + OTHER))
            by_default, by_column = (unwrapped(input_ids=padded, attention_mask=mask, **at).logits[:, OWN:]
                                     for at in ({}, {"position_ids": columns}))  # fmt: skip
    except Exception as err:  # whatever the model's own forward makes of a 4-D mask and packed positions
        return f"its forward raises on packed rows ({type(err).__name__}: {' '.join(str(err).split())[:160]})"
    finally:
        unwrapped.train(training)
    if not torch.equal(first, second):
        return (
            "a completion's log-probabilities change with the other completions of its group (layers that do not "
            "attend through the 4-D mask: state-space or linear attention, or a mask the model builds)"
        )
    if torch.equal(placed, shifted):
        return "it places tokens by their index, not by position_ids (ALiBi or alike)"
    if not torch.equal(by_default, by_column):
        return "it places a left-padded row's tokens otherwise than by their column (as OPT: from the first token)"
    return None


def _own_logps(trainer: Any, model: torch.nn.Module, prompt, other, own) -> torch.Tensor:
    """The log-probabilities of ``own``, packed after ``prompt`` with ``other`` before it in the same group."""
    prompts = prompt.expand(2, -1)
    completions = torch.stack([other, torch.cat([own, other[: len(other) - len(own)]])])
    completion_mask = torch.ones_like(completions)
    completion_mask[1, len(own) :] = 0
    logps = trainer.packed_log_probs(model, prompts, torch.ones_like(prompts), completions, completion_mask)
    return logps[1, : len(own)]
