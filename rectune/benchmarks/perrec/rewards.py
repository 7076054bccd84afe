"""GRPO rewards for PerRecBench, in TRL's signature over the ``train_rft_*.jsonl`` label columns.

Columns: ``task``, ``labels`` (the users' letters in prompt order), ``relative`` (their true
relative ratings), ``means`` (their mean ratings), ``group_relative`` (the whole group's true
relative ratings) and ``position`` (the pointwise user's index in the group, else -1).
"""

from __future__ import annotations

from rectune.benchmarks.perrec.prompts import parse_choice, parse_ranking
from rectune.benchmarks.perrec.scoring import tau
from rectune.data.completions import completion_text
from rectune.data.ratings import parse_rating


def _ranking(task: str, text: str, labels: list[str], relative: list[float], means: list[float],
             group_relative: list[float], position: int) -> float:  # fmt: skip
    if task == "pointwise":
        rating = parse_rating(text)
        if rating is None:
            return -1.0
        predicted = list(group_relative)
        predicted[position] = rating - means[0]
        return tau(group_relative, predicted)
    if task == "pairwise":
        choice = parse_choice(text)
        if choice is None:
            return -1.0
        best = labels[max(range(len(labels)), key=lambda i: relative[i])]
        return 1.0 if choice == best else -1.0
    order = parse_ranking(text, labels)
    if order is None:
        return -1.0
    return tau(relative, [-order.index(label) for label in labels])


def ranking(completions, task, labels, relative, means, group_relative, position, **kwargs) -> list[float]:
    """The evaluation's τ for each completion; an unparseable answer scores -1 (as bad as a reversed order).

    Pointwise: τ of the group's true relative ratings against the same ratings with this user's
    replaced by the prediction − their mean, i.e. how much the prediction disturbs the true order.
    Example: group relative ratings [1.0, -0.5, 0.2], user 0 with mean 3.0 answers "2": their
    predicted relative rating -1.0 puts them last, τ([1.0, -0.5, 0.2], [-1.0, -0.5, 0.2]) = -1/3.
    Pairwise: +1 for the letter of the user with the higher relative rating, else -1.
    Listwise: τ of the written order, e.g. "B > A" when B's relative rating is higher = 1.0.
    """
    return [
        _ranking(task[i], completion_text(c), labels[i], relative[i], means[i], group_relative[i], position[i])
        for i, c in enumerate(completions)
    ]


def format(completions, task, labels, **kwargs) -> list[float]:
    """1.0 when the answer parses in its format ("4", "B", "B > A > C"), else 0.0 ("no idea")."""
    values = []
    for i, c in enumerate(completions):
        text = completion_text(c)
        parsed = {"pointwise": parse_rating, "pairwise": parse_choice}.get(task[i])
        values.append(float((parsed(text) if parsed else parse_ranking(text, labels[i])) is not None))
    return values


REWARDS = {"ranking": ranking, "format": format}
DEFAULT_REWARDS = ("ranking", "format")
