"""Changes to GRPO's credit from ReRec (Huang et al., ACL 2026) and Rank-GRPO (Zhu et al., ICLR 2026), each off
unless a recipe sets it.

* Reasoning-aware advantage (``reasoning_aware_scale``, ReRec: 0.7): the tokens of completion lines that
  name a wrong pick (a candidate that is not a true item; the benchmark's ``misled_lines`` says which)
  are credited with ``scale`` times the completion's reward. With TRL's advantage ``A = (r - mean) / std``
  that is ``(scale * r - mean) / std = A - (1 - scale) * r / std`` on those tokens, the rest keep ``A``;
  ``|r|`` in place of ``r``, so that a negative reward is lowered rather than raised, and nothing where the
  rewards did not spread (``std`` at TRL's floor: a penalty over it would swamp every advantage).
* Online curriculum (``curriculum_reward``, ReRec: NDCG@1, i.e. ``ndcg_at_k`` at K = 1): a prompt's
  difficulty is 1 minus the mean of that reward over its completions in the last epoch; the next epoch
  leaves out prompts easier than ``curriculum_easy_cutoff`` (ReRec: 0.1) and feeds the rest easiest
  first (prompts not yet seen after them, in their order). The first epoch is TRL's shuffled order.
* Rank-level advantage (``rank_advantage``, Rank-GRPO): an answer's k-th item (of the first K) is credited
  with its reward-to-go, the NDCG@K terms it and the items after it earn (items before it do not: they
  were written first), standardised across the group's completions at rank k; that advantage is added to
  the completion's own on the item's tokens, and the tokens of items past K get -0.1 more, so a list
  longer than K costs. The benchmark says where each item ends and what it earns (``item_gains``).

This module holds the options and the arithmetic; :mod:`rectune.training.shaped_trainer` wires them
into TRL's GRPOTrainer.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field


@dataclass
class ShapingArguments:
    """ReRec's reasoning-aware advantage and online curriculum, Rank-GRPO's rank-level advantage (GRPO only; all off
    by default)."""

    reasoning_aware_scale: float | None = field(
        default=None,
        metadata={
            "help": "Credit tokens of lines naming a wrong pick with this share of the reward (ReRec: 0.7); "
            "None: off. Needs a benchmark that can tell (RecBench+ grounded prompts)."
        },
    )
    curriculum_reward: str | None = field(
        default=None,
        metadata={
            "help": "Online curriculum on this reward (one of reward_funcs; ReRec: ndcg_at_k at K = 1): each "
            "epoch after the first drops the prompts it found easy and orders the rest easiest first. None: off."
        },
    )
    curriculum_easy_cutoff: float = field(
        default=0.1, metadata={"help": "Curriculum: prompts of difficulty (1 - mean reward) below this are dropped."}
    )
    rank_advantage: bool = field(
        default=False,
        metadata={
            "help": "Rank-GRPO: each ranked item's tokens also get the advantage of its rank (its NDCG@K reward-to-go, "
            "standardised across the group at that rank); tokens of items past K get -0.1. Needs a benchmark with "
            "ranked answers (RecBench+)."
        },
    )

    def __post_init__(self) -> None:
        if self.reasoning_aware_scale is not None and not 0.0 <= self.reasoning_aware_scale <= 1.0:
            raise ValueError(f"reasoning_aware_scale: {self.reasoning_aware_scale} is not between 0 and 1")
        if not 0.0 <= self.curriculum_easy_cutoff <= 1.0:
            raise ValueError(f"curriculum_easy_cutoff: {self.curriculum_easy_cutoff} is not between 0 and 1")


def token_lines(token_texts: list[str]) -> list[int]:
    """The line each token belongs to: the line of its first character that is not a newline (a token that is
    only newlines: the line it ends). ``["Heat", " is", "\\n", "\\nJaws"]`` -> ``[0, 0, 0, 2]``."""
    lines, line = [], 0
    for text in token_texts:
        stripped = text.lstrip("\n")
        if stripped:
            line += len(text) - len(stripped)
            lines.append(line)
            line += stripped.count("\n")
        else:
            lines.append(line)
            line += len(text)
    return lines


STD_FLOOR = 1e-4  # what TRL adds to the standard deviation it divides advantages by


def reasoning_aware(advantage: float, reward: float, std: float, flagged: list[bool], scale: float) -> list[float]:
    """Per token: ``advantage`` where not flagged, ``advantage - (1 - scale) * |reward| / std`` where flagged
    (``std``: TRL's divisor, its floor included). A 1.5, reward 1.0, std 0.5, scale 0.7: ``[False, True]`` ->
    ``[1.5, 0.9]``. A negative reward is lowered too: ``scale`` times it would be a higher reward for the wrong
    pick. Where the rewards did not spread (``std`` within twice the floor) nothing changes: TRL's advantages
    are 0 there, and a penalty divided by the floor alone would be 10,000 times the reward."""
    if std < 2 * STD_FLOOR:
        return [advantage] * len(flagged)
    lowered = advantage - (1.0 - scale) * abs(reward) / std
    return [lowered if flag else advantage for flag in flagged]


class Curriculum:
    """Per prompt id, the rewards its completions got this epoch; :meth:`order` closes the epoch."""

    def __init__(self, easy_cutoff: float = 0.1):
        self.easy_cutoff = easy_cutoff
        self.difficulty: dict[str, float] = {}
        self._epoch: dict[str, list[float]] = {}

    def record(self, ids: list[str], values: list[float | None]) -> None:
        for prompt_id, value in zip(ids, values, strict=True):
            if value is not None and value == value:  # a reward that does not apply (None, NaN) says nothing
                self._epoch.setdefault(prompt_id, []).append(float(value))

    def order(self, ids: list[str], minimum: int = 1) -> list[int] | None:
        """Indexes into ``ids`` for the next epoch (None before anything was recorded): difficulty at least the
        cutoff, easiest first (ties and unseen prompts in their order), all of them if every prompt is easy; at
        least ``minimum`` (a batch: an epoch of none would end training), topped up with the hardest easy ones.
        Difficulties 0.05, 0.6, unseen, 0.3 with cutoff 0.1 -> ``[3, 1, 2]``; with minimum 4 -> ``[0, 3, 1, 2]``."""
        for prompt_id, values in self._epoch.items():
            self.difficulty[prompt_id] = 1.0 - sum(values) / len(values)
        self._epoch = {}
        if not self.difficulty:
            return None
        seen = [i for i, prompt_id in enumerate(ids) if prompt_id in self.difficulty]
        kept = [i for i in seen if self.difficulty[ids[i]] >= self.easy_cutoff]
        unseen = [i for i, prompt_id in enumerate(ids) if prompt_id not in self.difficulty]
        if not kept and not unseen:
            kept = seen
        easy = sorted(set(seen) - set(kept), key=lambda i: (-self.difficulty[ids[i]], i))
        kept += easy[: max(0, minimum - len(kept) - len(unseen))]
        return sorted(kept, key=lambda i: (self.difficulty[ids[i]], i)) + unseen

    def state(self) -> dict:
        """What a checkpoint keeps, so a resumed run orders its epochs as this one would."""
        return {"difficulty": self.difficulty, "epoch": self._epoch}

    def load(self, state: dict) -> None:
        self.difficulty = {str(k): float(v) for k, v in state["difficulty"].items()}
        self._epoch = {str(k): [float(x) for x in v] for k, v in state["epoch"].items()}


OVERLENGTH = -0.1  # Rank-GRPO's advantage for each token of an item past K


def rank_advantages(gains: list[list[float]], group: int, k: int) -> list[list[float]]:
    """Per completion, per rank below ``k`` and below the longest answer's length: the reward-to-go (the sum of
    its gain and the later ones), minus the mean over the completion's group (``group`` consecutive completions)
    at that rank, over their standard deviation (unbiased, as TRL's, + 1e-4; 0 where the group agrees). Group of
    two, K 2, gains [0.6, 0.4] and [0, 0]: reward-to-go [1.0, 0.4] and [0, 0] ->
    ``[[0.707, 0.707], [-0.707, -0.707]]``."""
    k = min(k, max((len(values) for values in gains), default=0))  # past every answer's end all agree: 0
    to_go = []
    for values in gains:
        padded = [*values[:k], *[0.0] * (k - len(values[:k]))]
        sums = list(itertools.accumulate(reversed(padded)))  # linear in K, however large a data's K is
        to_go.append(sums[::-1])
    advantages = [[0.0] * k for _ in gains]
    for start in range(0, len(gains), group):
        members = range(start, min(start + group, len(gains)))
        for rank in range(k):
            values = [to_go[i][rank] for i in members]
            mean = sum(values) / len(values)
            std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
            for i in members:
                advantages[i][rank] = (to_go[i][rank] - mean) / (std + 1e-4) if std > 0 else 0.0
    return advantages


def token_items(token_texts: list[str], item_ends: list[int]) -> list[int]:
    """The item each token writes: the first whose end offset lies past the token's first character that is
    not white space; ``len(item_ends)`` for tokens after the last item. Tokens ``["Heat", " [SEP]", " Jaws",
    "\n"]``, items ending at 4 and 15 -> ``[0, 1, 1, 2]`` (a separator belongs to the item it opens)."""
    items, offset = [], 0
    for text in token_texts:
        first = offset + len(text) - len(text.lstrip())
        items.append(next((i for i, end in enumerate(item_ends) if first < end), len(item_ends)))
        offset += len(text)
    return items
