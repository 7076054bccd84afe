"""RecBench+ (seeds 000/001): natural-language recommendation queries, scored by P, R, CMR and FTR.

Modules: ``rows`` (the canonical row), ``release`` (a RecBench+ release -> rows, catalog, KG),
``builder`` (a RecBench+-style benchmark from any item KG and interaction log), ``prompts``
(Appendix G), ``metrics`` (scoring) and ``rewards`` (GRPO).
"""

from __future__ import annotations

from rectune.benchmarks import Benchmark, MetricSpec, Resources, Scored
from rectune.benchmarks.recbench import metrics as scoring
from rectune.benchmarks.recbench import prompts
from rectune.benchmarks.recbench import rewards as reward_functions
from rectune.benchmarks.recbench.rows import NAME, TASKS, RecBenchRow


class RecBenchPlus(Benchmark):
    name = NAME
    row_type = RecBenchRow
    tasks = TASKS
    metrics = {
        "precision": MetricSpec("P"),
        "recall": MetricSpec("R"),
        "cmr": MetricSpec("CMR"),
        "ftr": MetricSpec("FTR", higher_is_better=False),  # except on misinformed queries, where refusing is right
        "kg_coverage": MetricSpec("KG cov."),
    }
    rewards = reward_functions.REWARDS
    default_rewards = reward_functions.DEFAULT_REWARDS
    label_columns = ("task", "ground_truth", "ground_truth_ids", "conditions")

    def messages(self, row: RecBenchRow, variant: dict) -> list[dict]:
        return prompts.build_messages(row, variant.get("with_history", False), variant.get("k"))

    def answer(self, row: RecBenchRow) -> str:
        return prompts.answer_text(row)

    def labels(self, rows: list[RecBenchRow]) -> list[dict]:
        return [
            {
                "task": row.task,
                "ground_truth": row.ground_truth,
                "ground_truth_ids": row.ground_truth_ids,
                "conditions": row.conditions,
            }
            for row in rows
        ]

    def score(self, rows: list[RecBenchRow], predictions: dict[str, str], resources: Resources) -> Scored:
        scores, table = scoring.score_all(rows, predictions, resources.matcher(), resources.kg())
        report = {"metrics": list(self.metrics), **scoring.aggregate(scores)}
        report["per_query"] = [vars(s).copy() for s in scores]
        return Scored(report, table)

    def format_table(self, report: dict) -> str:
        return scoring.format_table(report)


BENCHMARK = RecBenchPlus()
