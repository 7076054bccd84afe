"""GRPO diagnostics: does each reward give the policy a gradient?

GRPO learns only from groups (one prompt's ``num_generations`` completions) whose rewards differ:
a group where every completion scores the same has zero advantage everywhere. TRL logs each
reward's mean and std over the batch, the fraction of groups whose *weighted total* has zero
std, KL (when ``beta`` > 0) and completion lengths. :class:`DiagnosedGRPOTrainer` adds, per
reward, every logged step:

* ``rewards/<name>/zero_std_groups``: the fraction of groups in which that reward is constant;
* ``rewards/<name>/positive_share``: the share of completions it scores above 0 (for RecBench+'s
  ``recall``, the share of completions with at least one hit).

:func:`summary` reads a finished run's log history and says, in its last lines, which rewards
never varied within a group (so never produced a gradient).

It also records where each optimizer step's time goes, as ``seconds/<part>``: ``generate`` (sampling the
completions; ``prefill``, its first forward over the prompts, is part of it), ``rewards``, ``forward``
(the loss's forward), ``backward``, ``optimizer`` (clipping and the update) and ``other`` (the rest of
preparing a batch: tokenising, log-probabilities of the old policy, advantages). The summary prints
the averages.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

DIAGNOSTICS = "grpo_diagnostics.txt"  # the summary, written beside the adapter


def group_statistics(rewards_per_func: torch.Tensor, num_generations: int, names: list[str]) -> dict[str, float]:
    """Per reward: the fraction of groups where it is constant and the share of completions above 0.

    ``rewards_per_func`` is TRL's (completions x rewards) table, gathered from every process, with
    each prompt's completions consecutive and ``NaN`` where a reward does not apply. Groups where
    fewer than two completions are scored, and unscored completions, are left out.
    """
    metrics = {}
    grouped = rewards_per_func.detach().float().cpu().view(-1, num_generations, len(names))
    for index, name in enumerate(names):
        values = grouped[:, :, index]
        scored = ~torch.isnan(values)
        comparable = scored.sum(dim=1) >= 2
        if comparable.any():
            high = torch.where(scored, values, -math.inf).max(dim=1).values
            low = torch.where(scored, values, math.inf).min(dim=1).values
            constant = torch.isclose(high, low, rtol=0.0, atol=1e-6) & comparable
            metrics[f"rewards/{name}/zero_std_groups"] = constant.sum().item() / comparable.sum().item()
        if scored.any():
            metrics[f"rewards/{name}/positive_share"] = (values[scored] > 0).float().mean().item()
    return metrics


STEP_PARTS = ("generate", "prefill", "rewards", "forward", "backward", "optimizer", "other")


class _OptimizerClock(TrainerCallback):
    """Times the optimizer's part of each step and hands the step's seconds to the trainer's metrics."""

    def __init__(self, trainer: DiagnosedGRPOTrainer):
        self.trainer = trainer

    def on_optimizer_step(self, args, state, control, **kwargs):
        seconds = self.trainer.step_seconds
        seconds["optimizer"] += time.perf_counter() - self.trainer.last_backward_end
        seconds["other"] = seconds.pop("prepare", 0.0) - seconds["generate"] - seconds["rewards"]
        for part in STEP_PARTS:
            self.trainer._metrics["train"][f"seconds/{part}"].append(seconds.pop(part, 0.0))


class DiagnosedGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer, logging :func:`group_statistics` with its own reward metrics and the seconds
    each step spends in each part (``seconds/<part>``, :data:`STEP_PARTS`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.step_seconds: defaultdict[str, float] = defaultdict(float)
        self.last_backward_end = time.perf_counter()
        self._training_batch = False  # whether the batch being prepared is a training one (rollouts run in eval mode)
        self.add_callback(_OptimizerClock(self))

    @contextmanager
    def timed(self, part: str) -> Iterator[None]:
        """Adds the seconds spent within to this step's ``part`` (training only)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            if self._training_batch:
                self.step_seconds[part] += time.perf_counter() - start

    @contextmanager
    def prefill_timed(self, model: torch.nn.Module) -> Iterator[None]:
        """Within a generation by ``model``: its first forward (the prompts' prefill) timed as ``prefill``.
        The hooks go once it has run: a compiled decoding step (``compile_rollouts``) would trace them, and
        each call's timestamp recompiled it until dynamo gave up and decoded eagerly."""
        started: list[float] = []

        @torch.compiler.disable
        def before(*_):
            started.append(time.perf_counter())

        @torch.compiler.disable
        def after(*_):
            if self._training_batch:
                self.step_seconds["prefill"] += time.perf_counter() - started[0]
            for hook in hooks:
                hook.remove()

        hooks = [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def training_step(self, model, inputs, num_items_in_batch):
        start, before = time.perf_counter(), dict(self.step_seconds)
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.last_backward_end = time.perf_counter()
        timed_within = sum(self.step_seconds[part] - before.get(part, 0.0) for part in ("prepare", "forward"))
        self.step_seconds["backward"] += self.last_backward_end - start - timed_within
        return loss

    def _prepare_inputs(self, generation_batch):
        self._training_batch = self.model.training
        with self.timed("prepare"):
            return super()._prepare_inputs(generation_batch)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        with self.timed("forward"):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    def _generate_single_turn(self, *args, **kwargs):
        with self.timed("generate"):
            return super()._generate_single_turn(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # TRL's hook returns the rewards gathered from all processes in group order: the table GRPO normalises
        with self.timed("rewards"):
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        mode = "train" if self.model.training else "eval"
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        for key, value in group_statistics(rewards_per_func, num_generations, self.reward_func_names).items():
            self._metrics[mode][key].append(value)
        return rewards_per_func


def summary(log_history: list[dict[str, Any]], reward_names: list[str]) -> str:
    """The end-of-run report: each reward's averages over the run, and the rewards that gave no signal."""
    steps = [entry for entry in log_history if "reward" in entry and "step" in entry]
    if not steps:
        return "GRPO diagnostics: no training step was logged."

    def values(key: str) -> list[float]:
        return [entry[key] for entry in steps if isinstance(entry.get(key), int | float) and math.isfinite(entry[key])]

    def average(key: str) -> str:
        found = values(key)
        return f"{sum(found) / len(found):.3g}" if found else "-"

    lines = [f"GRPO diagnostics over {len(steps)} logged steps (averages):"]
    for name in reward_names:
        prefix = f"rewards/{name}"
        lines.append(
            f"  {name}: mean {average(prefix + '/mean')}, std {average(prefix + '/std')}, "
            f"above 0 in {average(prefix + '/positive_share')} of completions, "
            f"constant in {average(prefix + '/zero_std_groups')} of groups"
        )
    lines.append(
        f"  total reward: constant in {average('frac_reward_zero_std')} of groups; KL {average('kl')}; "
        f"completion length {average('completions/mean_length')} tokens, "
        f"{average('completions/clipped_ratio')} cut at max_completion_length"
    )
    lines.append(f"  reward by steps: {reward_curve(steps)}")
    if values("seconds/generate"):
        parts = ", ".join(f"{part} {average('seconds/' + part)}" for part in STEP_PARTS if part != "prefill")
        lines.append(f"  seconds a step: {parts} (prefill {average('seconds/prefill')} of generate)")
    for name in reward_names:
        constant = values(f"rewards/{name}/zero_std_groups")
        if constant and min(constant) == 1.0:
            lines.append(
                f"  warning: {name} never varied within a group in {len(steps)} steps: it gave GRPO no gradient"
            )
    if values("frac_reward_zero_std") and min(values("frac_reward_zero_std")) == 1.0:
        lines.append("  warning: no group's total reward ever varied: the adapter did not learn from the rewards")
    return "\n".join(lines)


def reward_curve(steps: list[dict[str, Any]], points: int = 8) -> str:
    """The mean total reward over at most ``points`` consecutive slices of the logged steps, as
    ``first-last mean`` pairs: the curve's shape in one line, however many steps the run logged."""
    size, extra = divmod(len(steps), points)
    parts, start = [], 0
    for index in range(min(points, len(steps))):
        piece = steps[start : start + size + (index < extra)]
        start += len(piece)
        first, last = piece[0]["step"], piece[-1]["step"]
        span = f"{first}" if first == last else f"{first}-{last}"
        # a step whose total reward was not finite is logged without one (None)
        rewards = [r for entry in piece if isinstance(r := entry["reward"], int | float) and math.isfinite(r)]
        parts.append(f"{span} {sum(rewards) / len(rewards):.3g}" if rewards else f"{span} -")
    return ", ".join(parts)
