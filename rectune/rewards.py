"""GRPO reward functions for RecBench+, built on the same scorer as evaluation.

Each reward is a pure function of a completion and its labels (the ``train_rft.jsonl``
columns GRPOTrainer forwards: ``ground_truth``, ``ground_truth_ids``, ``conditions``,
``task``); it never raises, whatever the text. Rewards that do not apply to a row return
``None`` (TRL then leaves them out of that row's weighted sum).

========================  ====================================================================
``recall``                hits / ground-truth items
``precision``             hits / recommended items (hallucinations included)
``f1``                    harmonic mean of the two
``cmr``                   condition match rate against the KG (condition-based tasks only)
``format``                1.0 for a clean list of titles (every non-empty line is a title),
                          0.5 when titles are mixed with prose, 0.0 when nothing parses
``hallucination``         minus the share of recommended mentions that resolve to no catalog item
``misinformed``           misinformed queries only: 1.0 when the answer refuses (recommends
                          nothing) or recommends at least one true ground-truth item, i.e. it
                          did not follow the false premise; 0.0 when every recommended item is
                          outside the ground truth
========================  ====================================================================

The misinformed rule rewards both answers the paper counts as good (a refusal raises FTR,
which is better on misinformed queries; a corrected premise raises recall) and punishes
only recommendations built on the wrong fact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rectune.catalog import KnowledgeGraph
from rectune.metrics import QueryScore, score_query
from rectune.schema import BenchmarkRow
from rectune.titles import Extraction, TitleMatcher, parse_mentions

RewardFunc = Callable[..., list[float | None]]


def completion_text(completion: object) -> str:
    """Text of a completion in TRL's standard (str) or conversational (list of messages) form."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(
            m.get("content", "") for m in completion if isinstance(m, dict) and isinstance(m.get("content"), str)
        )
    if isinstance(completion, dict) and isinstance(completion.get("content"), str):
        return completion["content"]
    return ""


def _label_row(task: str, ground_truth: list[str], ground_truth_ids: list[str], conditions: list) -> BenchmarkRow:
    return BenchmarkRow(
        id="reward",
        benchmark="recbench+",
        domain="movie",
        task=task,
        query="-",
        ground_truth=list(ground_truth) or ["-"],
        ground_truth_ids=list(ground_truth_ids or []),
        conditions=[list(c) for c in conditions or []],
        condition_num=len(conditions or []),
    )


def format_score(text: str, extraction: Extraction, matcher: TitleMatcher) -> float:
    if extraction.count == 0:
        return 0.0
    lines = [line for line in text.splitlines() if line.strip()]
    clean = all(parse_mentions(line, matcher) for line in lines)
    return 1.0 if clean else 0.5


@dataclass
class Judged:
    """One completion scored against its labels: what every reward rule reads."""

    score: QueryScore
    row: BenchmarkRow
    extraction: Extraction
    text: str
    matcher: TitleMatcher


def _f1(j: Judged) -> float:
    total = j.score.precision + j.score.recall
    return 2 * j.score.precision * j.score.recall / total if total else 0.0


def _misinformed(j: Judged) -> float | None:
    if j.row.task != "misinformed":
        return None
    return 1.0 if j.extraction.count == 0 or j.score.n_hits > 0 else 0.0


REWARDS: dict[str, Callable[[Judged], float | None]] = {
    "recall": lambda j: j.score.recall,
    "precision": lambda j: j.score.precision,
    "f1": _f1,
    "cmr": lambda j: j.score.cmr,
    "format": lambda j: format_score(j.text, j.extraction, j.matcher),
    "hallucination": lambda j: -len(j.extraction.unresolved) / j.extraction.count if j.extraction.count else 0.0,
    "misinformed": _misinformed,
}


def make_reward_funcs(names: list[str], matcher: TitleMatcher, kg: KnowledgeGraph) -> list[RewardFunc]:
    """Reward callables in GRPOTrainer's signature, named after the reward (TRL logs them by name)."""
    unknown = [n for n in names if n not in REWARDS]
    if unknown:
        raise ValueError(f"unknown reward {unknown[0]!r}; choose from {', '.join(REWARDS)}")
    return [_bind(name, matcher, kg) for name in names]


def _bind(name: str, matcher: TitleMatcher, kg: KnowledgeGraph) -> RewardFunc:
    rule = REWARDS[name]

    def reward(completions, ground_truth, ground_truth_ids, task, conditions=None, **_) -> list[float | None]:
        texts = [completion_text(c) for c in completions]
        extractions = matcher.extract_many(texts)
        values = []
        for i, (text, extraction) in enumerate(zip(texts, extractions, strict=True)):
            row = _label_row(task[i], ground_truth[i], ground_truth_ids[i], conditions[i] if conditions else [])
            values.append(rule(Judged(score_query(row, extraction, matcher, kg), row, extraction, text, matcher)))
        return values

    reward.__name__ = name
    return reward
