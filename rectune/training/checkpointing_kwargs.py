"""What a recipe's ``gradient_checkpointing_kwargs`` (``activation_checkpointing_kwargs``) may hold.

Most keys go to torch's ``checkpoint``; three are read before that, by the libraries: transformers' Trainer takes
``every_n_layers`` (checkpoint one decoder layer in n, giving memory back to speed) and ``offload`` (keep what the
recompute needs in host memory), and TRL's SFT trainer takes ``selective`` (save attention's output, recompute the
rest). TRL's GRPO trainer turns checkpointing off around each rollout's log-probabilities and on again with the
dictionary as it is, so from the second step on every layer was checkpointed, without offloading, and the three
keys reached torch's ``checkpoint``, which hands them to each layer's ``forward`` or refuses them; ``selective``
TRL's GRPO never reads. There they are refused, not dropped silently.
"""

from __future__ import annotations

import inspect
from typing import Any

# key -> (the type it must have, what it does), read by the trainer before torch's checkpoint sees the rest
TRAINER_KEYS = {
    "every_n_layers": (int, "checkpoint one decoder layer in this many (transformers)"),
    "offload": (bool, "keep the saved activations in host memory (transformers)"),
    "selective": (bool, "save attention's output and recompute the rest (TRL's SFT)"),
}
LOST_IN_GRPO = "TRL's GRPO turns checkpointing back on around each rollout with torch's keys only; it works in SFT"


def checkpointing_problem(config: Any) -> str | None:
    """What is wrong with ``config``'s checkpointing keywords, or None."""
    given = getattr(config, "gradient_checkpointing_kwargs", None)
    if not isinstance(given, dict):
        return None
    import torch
    from torch.utils.checkpoint import checkpoint

    parameters = inspect.signature(checkpoint).parameters.values()
    torch_keys = {p.name for p in parameters if p.kind is p.KEYWORD_ONLY} | {"preserve_rng_state"}
    grpo = any(c.__name__ == "GRPOConfig" for c in type(config).__mro__)
    for key, value in given.items():
        if key in TRAINER_KEYS:
            kind, does = TRAINER_KEYS[key]
            if grpo and key == "selective":  # TRL's GRPO never reads it
                return f"'selective' ({does}) is read in SFT only: TRL's GRPO hands it on to torch's checkpoint"
            if grpo:
                return f"{key!r} ({does}) is lost after GRPO's first step: {LOST_IN_GRPO}"
            if not getattr(config, "gradient_checkpointing", True):  # the trainer reads them only to turn it on
                return f"{key!r} does nothing with activation checkpointing off (activation_checkpointing: true)"
            if type(value) is not kind or (key == "every_n_layers" and value < 1):
                return f"{key!r}: {value!r} is not {'a whole number of at least 1' if kind is int else 'true or false'}"
            if key == "offload" and value and not torch.accelerator.is_available():  # pinned memory needs one
                return "'offload' needs a GPU: on a CPU the saved activations are in host memory already"
        elif key not in torch_keys:
            takes = ", ".join(sorted(torch_keys | (set() if grpo else set(TRAINER_KEYS))))
            return f"{key!r} is none of the keys checkpointing takes ({takes})"
    return None


def selective_checkpointing_under_lora(trainer: Any) -> None:
    """Make TRL's ``selective: true`` reach a LoRA model's layers. TRL wraps the model it holds, the PEFT model, but
    transformers' Trainer turns checkpointing on through the model under it, which never sees the wrapper: the key
    reached torch's ``checkpoint``, a ValueError at the first step. The same wrapper goes on that model."""
    if not (trainer.args.gradient_checkpointing_kwargs or {}).get("selective"):
        return
    if hasattr(trainer.model, "get_base_model"):
        from trl.models import enable_selective_activation_checkpointing

        enable_selective_activation_checkpointing(trainer.model.get_base_model())
