"""Choosing the best checkpoint: the metric transformers compares evaluations by, and early stopping on it.

Transformers looks ``metric_for_best_model`` up in each evaluation's metrics only after the evaluation, and a
name the trainer does not log (``metric_for_best_model: recall``, where SFT logs its loss, entropy and token
accuracy) was a ``KeyError``, a traceback, at the first evaluation. Which metrics a trainer logs depends on TRL's
version and the run's settings, so the name is checked against the first evaluation's own metrics, before
transformers reads them.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

from rectune.core.io import RecTuneError
from rectune.training.arguments import RunArguments


class BestMetricLogged(TrainerCallback):
    """Stop in one line, at the first evaluation, when it logged no ``metric_for_best_model``."""

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict | None = None, **_: Any) -> None:
        name = args.metric_for_best_model
        if name is None or metrics is None:
            return
        logged = name if name.startswith("eval_") else f"eval_{name}"
        if logged not in metrics:
            names = ", ".join(sorted(key.removeprefix("eval_") for key in metrics if key.startswith("eval_")))
            raise RecTuneError(
                f"metric_for_best_model {name!r}: the evaluation at step {state.global_step} logged no {logged} "
                f"(it logs {names}); name one of them"
            )


def best_checkpoint_callbacks(training_args: Any, run_args: RunArguments) -> list:
    """The check of ``metric_for_best_model`` where one is compared, and transformers' early-stopping callback
    when ``early_stopping_patience`` is set."""
    callbacks: list = [BestMetricLogged()] if training_args.metric_for_best_model is not None else []
    if run_args.early_stopping_patience is None:
        return callbacks
    if not training_args.load_best_model_at_end:
        raise RecTuneError(
            "early_stopping_patience needs load_best_model_at_end: true (and save_strategy equal to eval_strategy) "
            "so the best checkpoint is the one kept"
        )
    from transformers import EarlyStoppingCallback

    return [*callbacks, EarlyStoppingCallback(early_stopping_patience=run_args.early_stopping_patience)]
