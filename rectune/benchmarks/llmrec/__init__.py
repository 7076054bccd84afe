"""LLMRec (seed 003): rating prediction, sequential and direct recommendation, explanation
generation and review summarisation on Amazon-style reviews.

Modules: ``rows`` (the canonical row), ``build`` (5-core, leave-one-out, the five tasks),
``prompts``, ``scoring`` (RMSE/MAE, HR/NDCG, BLEU-4/ROUGE) and ``rewards`` (GRPO).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from rectune.benchmarks import Benchmark, MetricSpec, Resources, Scored
from rectune.benchmarks.llmrec import baselines as baseline_models
from rectune.benchmarks.llmrec import prompts, scoring
from rectune.benchmarks.llmrec import rewards as reward_functions
from rectune.benchmarks.llmrec.rows import NAME, RANKING_TASKS, TASKS, LLMRecRow
from rectune.data.rows import label_kind_problem


def _ranking_matcher(tasks: set[str], resources: Resources) -> Any:
    """The catalog's matcher where ``tasks`` hold a ranking task, else None: only ranking answers are matched
    against the catalog, so text-only data needs none."""
    return resources.matcher() if tasks & set(RANKING_TASKS) else None


class LLMRec(Benchmark):
    name = NAME
    answer_tokens = 160  # a direct answer's 10 titles (up to 130 on the demo world), a 64-word review (about 90)
    row_type = LLMRecRow
    tasks = TASKS
    metrics = {
        "rmse": MetricSpec("RMSE", "error", higher_is_better=False),
        "mae": MetricSpec("MAE", "error", higher_is_better=False),
        **{f"{m}@{k}": MetricSpec(f"{m.upper()}@{k}") for k in scoring.KS for m in ("hr", "ndcg")},
        **{m: MetricSpec(label, "percent") for m, label in
           (("bleu4", "BLEU-4"), ("rouge1", "ROUGE-1"), ("rouge2", "ROUGE-2"), ("rougeL", "ROUGE-L"))},
        "na_rate": MetricSpec("N/A", higher_is_better=False),
    }  # fmt: skip
    baselines = baseline_models.BASELINES
    rewards = reward_functions.REWARDS
    default_rewards = reward_functions.DEFAULT_REWARDS
    label_columns = ("task", "target", "item_id", "candidate_ids")
    metric_transforms = {"rmse": math.sqrt}

    def unit_values(self, record: dict) -> dict[str, float | None]:
        """Per query: squared and absolute rating errors, hits and NDCG at each cut-off, N/A. BLEU and ROUGE
        need the references, which reports do not keep per query: they get no interval."""
        values: dict[str, float | None] = {metric: None for metric in self.metrics}
        values["na_rate"] = float(record["na"])
        rank = record["rank"]  # 0-based: a report's -1 was a ZeroDivisionError in NDCG
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or rank < 0):
            raise ValueError(f"'rank' must be a whole number of at least 0 or null, got {rank!r}")
        if record["task"] == "rating" and record["error"] is not None:
            values["rmse"], values["mae"] = record["error"] * record["error"], abs(record["error"])
        elif record["task"] in RANKING_TASKS:
            for k in scoring.KS:
                hit = rank is not None and rank < k
                values[f"hr@{k}"] = float(hit)
                values[f"ndcg@{k}"] = scoring.ndcg(rank, k) if hit else 0.0
        return values

    def messages(self, row: LLMRecRow, variant: dict) -> list[dict]:
        return prompts.build_messages(row)

    def answer(self, row: LLMRecRow, variant: dict) -> str:
        if row.task == "direct" and row.candidates:
            return prompts.direct_answer(row)
        return row.target

    def labels(self, rows: list[LLMRecRow]) -> list[dict]:
        return [
            {
                "task": row.task,
                "target": row.target,
                "item_id": row.item["id"],
                "candidate_ids": [c["id"] for c in row.candidates or []],
            }
            for row in rows
        ]

    def label_problem(self, labels: dict) -> str | None:
        kinds = {"target": "string", "item_id": "string", "candidate_ids": "strings"}
        problem = label_kind_problem(labels, kinds, TASKS)
        if problem is None and labels["task"] == "rating":
            try:
                rating = float(labels["target"])
            except ValueError:
                rating = math.nan
            if not math.isfinite(rating):  # the reward reads it as float(target)
                problem = f"field 'target': a rating example needs a finite number, got {labels['target'][:60]!r}"
        return problem

    def load_scoring_files(self, tasks: set[str], resources: Resources) -> None:
        _ranking_matcher(tasks, resources)

    def score(self, rows: list[LLMRecRow], predictions: dict[str, str], resources: Resources) -> Scored:
        matcher = _ranking_matcher({row.task for row in rows}, resources)
        scores = scoring.score_queries(rows, predictions, matcher)
        report = {"metrics": list(self.metrics), **scoring.aggregate(scores, rows)}
        report["per_query"] = [vars(s).copy() for s in scores]
        return Scored(report, functools.partial(scoring.query_table, rows, predictions, scores))

    def tuning_value(self, report: dict) -> float:
        """NDCG@10 for the ranking tasks, −RMSE for rating, averaged over the tasks a baseline answers."""
        values = []
        for task, summary in report["by_task"].items():
            if task == "rating" and summary.get("rmse") is not None:
                values.append(-summary["rmse"])
            elif summary.get("ndcg@10") is not None:
                values.append(summary["ndcg@10"])
        return sum(values) / len(values) if values else float("-inf")

    def format_table(self, report: dict) -> str:
        return scoring.format_table(report)


BENCHMARK = LLMRec()
