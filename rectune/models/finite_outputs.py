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


def non_finite_output(model: Any) -> str | None:
    """Where ``model`` (in eval mode; its mode is kept) computes NaN from a few tokens, or None where it computes
    finite values: ``"its logits are"``, or ``"its NAME computes"`` for the first module whose output holds NaN
    on the way. The logits alone do not tell: a CPU's attention kernel can turn NaN queries (a rotary scaling of
    factor 0) into zeros, finite logits from a model that trains into NaN at its first step."""
    import torch

    names = {module: name.removeprefix("base_model.model.") for name, module in model.named_modules()}
    last = {model, model.get_output_embeddings()}  # NaN there is the logits'
    found: list[str] = []

    def note_nan(module: Any, _inputs: Any, output: Any) -> None:
        if found or module in last:
            return
        parts = (
            output.values() if isinstance(output, dict) else output if isinstance(output, tuple | list) else [output]
        )
        if any(isinstance(t, torch.Tensor) and t.is_floating_point() and bool(torch.isnan(t).any()) for t in parts):
            found.append(f"its {names[module]} computes")

    vocabulary = model.get_input_embeddings().num_embeddings
    tokens = (torch.arange(1, PROBE_TOKENS + 1, device=model.device) % vocabulary).unsqueeze(0)
    training = model.training
    hooks = [module.register_forward_hook(note_nan) for module in names]
    try:
        with torch.no_grad():
            logits = model.eval()(input_ids=tokens).logits
    finally:
        for hook in hooks:
            hook.remove()
        model.train(training)
    return found[0] if found else None if bool(torch.isfinite(logits).all()) else "its logits are"


def non_finite_weight_error(source: str, name: str) -> RecTuneError:
    """The one line for ``source``'s weight ``name`` holding NaN or inf."""
    return RecTuneError(f"{source}: its weight {name} holds NaN or inf, so every answer would be noise")


def check_finite_outputs(model: Any, source: str) -> None:
    """One line naming ``source`` when ``model`` (on its device) holds a weight that is not finite, or computes
    logits that are not finite from a few tokens."""
    name = non_finite_weight(model)
    if name is not None:
        raise non_finite_weight_error(source, name)
    where = non_finite_output(model)
    if where is not None:
        raise RecTuneError(f"{source}: its weights are finite but {where} NaN or inf, so every answer would be noise "
                           f"({NON_FINITE_CAUSES})")  # fmt: skip
