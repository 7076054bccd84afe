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

PerRecBench rows (``benchmark: perrecbench`` in the RFT file) use ``rectune.perrec.REWARDS``
(``ranking``: the evaluation's Kendall's τ for the completion, -1 when unparseable; ``format``)
and LLMRec rows ``rectune.llmrec.reward_rules`` (``task``: the task's own metric; ``format``);
:func:`benchmark_reward_funcs` picks the set.

The misinformed rule rewards both answers the paper counts as good (a refusal raises FTR,
which is better on misinformed queries; a corrected premise raises recall) and punishes
only recommendations built on the wrong fact.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

from rectune import llmrec, perrec
from rectune.catalog import KnowledgeGraph, beside, load_catalog, load_kg
from rectune.io import DataError
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


DEFAULT_REWARDS = ["recall", "format", "hallucination", "misinformed"]


def _first_benchmark(path: str | os.PathLike) -> str:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    return json.loads(line).get("benchmark", "recbench+")
                except (json.JSONDecodeError, AttributeError):
                    raise DataError(path, "first row is not a JSON object") from None
    raise DataError(path, "file is empty")


def _bind_labelled(name: str, rule: Callable[..., float], columns: tuple[str, ...]) -> RewardFunc:
    """A reward over per-row label columns: ``rule(task, text, *labels)`` for each completion."""

    def reward(completions, task, **labels) -> list[float | None]:
        missing = [c for c in columns if c not in labels]
        if missing:
            raise KeyError(f"reward {name!r} needs the column {missing[0]!r} in the RFT data")
        return [
            rule(task[i], completion_text(c), *(labels[col][i] for col in columns)) for i, c in enumerate(completions)
        ]

    reward.__name__ = name
    return reward


def benchmark_reward_funcs(
    names: list[str], data_file: str | os.PathLike, catalog: str | None = None, kg: str | None = None
) -> tuple[list[RewardFunc], list[str]]:
    """The reward callables for the benchmark of ``data_file``'s rows (its defaults when ``names`` is empty)."""
    benchmark = _first_benchmark(data_file)
    if benchmark == "perrecbench":
        table, defaults = perrec.REWARDS, perrec.DEFAULT_REWARDS
        columns = {"ranking": perrec.RANKING_COLUMNS, "format": ("labels",)}
    elif benchmark == "llmrec":
        matcher = TitleMatcher(load_catalog(beside(data_file, "catalog.jsonl", catalog)))
        table, defaults = llmrec.reward_rules(matcher), llmrec.DEFAULT_REWARDS
        columns = {name: llmrec.REWARD_COLUMNS for name in table}
    else:
        names = names or DEFAULT_REWARDS
        matcher = TitleMatcher(load_catalog(beside(data_file, "catalog.jsonl", catalog)))
        return make_reward_funcs(names, matcher, load_kg(beside(data_file, "kg.jsonl", kg))), names
    names = names or defaults
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"unknown {benchmark} reward {unknown[0]!r}; choose from {', '.join(table)}")
    return [_bind_labelled(n, table[n], columns[n]) for n in names], names
