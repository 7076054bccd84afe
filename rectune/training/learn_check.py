"""The learn check: GRPO from the base model on a reward it can learn in minutes, to show the machinery
learns before anyone asks it to learn recommendations.

The reward, :func:`answer_length`, pays an answer for being close to :data:`TARGET_CHARS` characters
long. Sampled answers of one prompt differ in length far more than in quality, so every group has a
spread of rewards (GRPO's advantage is never zero), and a model of any size can move towards it in a
few dozen steps. The verdict is read from held-out prompts: the saved adapter's greedy answers must
earn more than the base model's, prompt by prompt, beyond noise. (The training curve is printed too,
but it rises within the first few steps and then plateaus, so its two ends differ by less than the
noise of a step's mean.) What the check exercises is what every RFT run relies on: the data's RFT view,
a reward found by dotted import path and called in TRL's signature, TRL's GRPO trainer, the saved
adapter, and loading that adapter again for greedy generation.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from rectune.data.completions import completion_text

TARGET_CHARS = 80  # about two titles with years: far shorter than the base model's sampled answers


def answer_length(completions: list, **kwargs) -> list[float]:
    """1.0 for an answer of :data:`TARGET_CHARS` characters, falling linearly to 0.0 at none or twice as many."""
    return [max(0.0, 1.0 - abs(len(completion_text(c).strip()) - TARGET_CHARS) / TARGET_CHARS) for c in completions]


def reward_curve(trainer_state: Path, reward: str = "answer_length") -> list[float]:
    """The mean of ``reward`` at each logged step of a finished run (its ``trainer_state.json``)."""
    history = json.loads(trainer_state.read_text(encoding="utf-8"))["log_history"]
    return [entry[f"rewards/{reward}/mean"] for entry in history if f"rewards/{reward}/mean" in entry]


def rise(curve: list[float], window: int) -> tuple[float, float, float]:
    """(mean of the first ``window`` steps, of the last ``window``, the standard error of their difference:
    each window's sample variance over its size, summed, as Welch's test has it)."""
    first, last = curve[:window], curve[-window:]
    error = (statistics.variance(first) / len(first) + statistics.variance(last) / len(last)) ** 0.5
    return statistics.fmean(first), statistics.fmean(last), error


def paired_rise(before: list[float], after: list[float]) -> tuple[float, float, float]:
    """(mean reward ``before``, mean ``after``, the standard error of their mean difference): the same
    prompts answered by two models, so the difference is taken prompt by prompt."""
    differences = [b - a for a, b in zip(before, after, strict=True)]
    error = statistics.stdev(differences) / len(differences) ** 0.5
    return statistics.fmean(before), statistics.fmean(after), error


def clear_rise(first: float, last: float, error: float) -> bool:
    """A rise beyond noise: at least 0.1 and three standard errors."""
    return last - first >= max(0.1, 3 * error)
