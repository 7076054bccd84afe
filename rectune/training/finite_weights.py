"""Stop a run whose trained weights stopped being finite, before it saves them.

A learning rate too high, or fp16 overflowing, turns the weights into NaN or inf in one step. transformers
goes on: its ``logging_nan_inf_filter`` (on by default) logs an average of earlier losses in place of each
NaN one (a diverged SFT run logged ``loss 0``), every later step computes on NaN, and the run ends by saving,
sealing and carding a NaN adapter as finished, which evaluation then scores as a model. Checked after every
optimizer step, before anything is saved: a few kernels over the trained parameters only; and every weight
once before the first step, with one forward of a few tokens, so a model that was NaN before training (its
weights, or a configuration value that turns its outputs into NaN) is not blamed on the learning rate.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback

from rectune.core.io import RecTuneError
from rectune.models.finite_outputs import NON_FINITE_CAUSES, non_finite_output, non_finite_weight


def weights_finite(model: torch.nn.Module, trained_only: bool = True) -> bool:
    """Whether every trained parameter of ``model`` (every parameter, with ``trained_only`` False) holds finite
    values, on every process of the run (a shard of a parameter may go NaN on one only; a process stopping alone
    would leave the others waiting)."""
    checked = [p for p in model.parameters() if p.requires_grad or not trained_only]
    if not checked:
        return True
    device = checked[0].device  # a model spread over devices (device_map) holds its adapter on several
    return on_every_process(torch.stack([torch.isfinite(p).all().to(device) for p in checked]).all())


def on_every_process(holds: torch.Tensor) -> bool:
    """Whether ``holds`` (a boolean on this process's device) is true on every process of the run (one process
    stopping alone would leave the others waiting)."""
    holds = holds.to(torch.int32)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(holds, op=torch.distributed.ReduceOp.MIN)
    return bool(holds.item())


def weights_whole(model: torch.nn.Module) -> bool:
    """Whether each process holds every weight whole (one process, DDP), where a forward of its own can run: not
    under ZeRO-3 or FSDP, whose shards are gathered only by a forward of every process under their wrapper."""
    from torch.distributed.tensor import DTensor

    sharded = (hasattr(p, "ds_id") or isinstance(p, DTensor) or getattr(p, "_is_flat_param", False)
               for p in model.parameters())  # fmt: skip
    return not any(sharded)


class FiniteWeights(TrainerCallback):
    """Raise a :class:`RecTuneError` (one line, exit 2) before the first step when the model already holds NaN or
    inf, and at the end of the first step whose update left a trained weight NaN or inf; the run keeps its
    earlier checkpoints and is not marked finished."""

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """A model that holds NaN or inf before any step (a stranger's broken checkpoint) is named as such, not
        as a learning rate that diverged at step 1."""
        if model is None:
            return
        source = getattr(getattr(model, "config", None), "name_or_path", None) or "the model"
        if not weights_finite(model, trained_only=False):
            name = non_finite_weight(model)  # this process's shard may hold none of them
            name = name and name.removeprefix("base_model.model.")  # the checkpoint's name, not PEFT's wrapping
            held = f"its weight {name} holds" if name else "its weights hold"
            raise RecTuneError(f"{source}: {held} NaN or inf before any training step: a broken checkpoint, which "
                               "no learning rate fixes")  # fmt: skip
        if not weights_whole(model):
            return
        where = non_finite_output(model)
        if not on_every_process(torch.tensor(where is None, device=next(model.parameters()).device)):
            where = where or "it computes"  # on another process
            raise RecTuneError(f"{source}: its weights are finite but {where} NaN or inf before any training step "
                               f"({NON_FINITE_CAUSES}): no learning rate fixes it")  # fmt: skip

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is None or weights_finite(model):
            return
        raise RecTuneError(
            f"training diverged at step {state.global_step}: the trained weights hold NaN or inf, and nothing of "
            f"this step was saved; lower learning_rate (now {args.learning_rate:g}) or train in bf16 rather than "
            "fp16, then start again (another output_dir, or --overwrite to resume from its last checkpoint)"
        )
