"""A model that computes NaN or inf is refused as it loads, before it answers.

A stranger's checkpoint can hold NaN or inf weights (a diverged run's, a broken conversion's), finite weights so
large that their products overflow, or a configuration value no check knows of that turns every output into
NaN. Such a model answers all the same: each token is the argmax of NaN logits (token 0), and evaluation
scored those answers, empty completions, as the model's. Checked once, as the model loads: its weights, then
one forward of a few tokens.
"""

from __future__ import annotations

from typing import Any

from rectune.core.io import RecTuneError

PROBE_TOKENS = 8  # any few tokens: a configuration that yields NaN yields it at every position


def non_finite_weight(model: Any) -> str | None:
    """The name of ``model``'s first parameter holding NaN or inf (in this process), or None."""
    import torch

    for name, parameter in model.named_parameters():
        if not torch.isfinite(parameter).all():
            return name
    return None


# What finite weights with logits that are not finite come from
NON_FINITE_CAUSES = (
    "weights that overflow as they are multiplied, or a value in its config.json that breaks the computation"
)


def logits_finite(model: Any) -> bool:
    """Whether ``model`` computes finite logits from a few tokens (in eval mode; its mode is kept)."""
    import torch

    vocabulary = model.get_input_embeddings().num_embeddings
    tokens = (torch.arange(1, PROBE_TOKENS + 1, device=model.device) % vocabulary).unsqueeze(0)
    training = model.training
    try:
        with torch.no_grad():
            logits = model.eval()(input_ids=tokens).logits
    finally:
        model.train(training)
    return bool(torch.isfinite(logits).all())


def check_finite_outputs(model: Any, source: str) -> None:
    """One line naming ``source`` when ``model`` (on its device) holds a weight that is not finite, or computes
    logits that are not finite from a few tokens."""
    name = non_finite_weight(model)
    if name is not None:
        raise RecTuneError(f"{source}: its weight {name} holds NaN or inf, so every answer would be noise")
    if not logits_finite(model):
        raise RecTuneError(f"{source}: its weights are finite but its logits are NaN or inf, so every answer would be "
                           f"noise ({NON_FINITE_CAUSES})")  # fmt: skip
