"""RecBench+ (seeds 000/001): natural-language recommendation queries, scored by P, R, CMR and FTR.

Modules: ``rows`` (the canonical row), ``release`` (a RecBench+ release -> rows, catalog, KG),
``builder`` (a RecBench+-style benchmark from any item KG and interaction log), ``prompts``
(Appendix G), ``metrics`` (scoring) and ``rewards`` (GRPO).
"""

from __future__ import annotations

from rectune.benchmarks import Benchmark, MetricSpec, Resources, Scored
from rectune.benchmarks.recbench import baselines as baseline_models
from rectune.benchmarks.recbench import metrics as scoring
from rectune.benchmarks.recbench import official, prompts, ranks, rerec
from rectune.benchmarks.recbench import rewards as reward_functions
from rectune.benchmarks.recbench.rows import NAME, TASKS, RecBenchRow
from rectune.data.rows import label_kind_problem


class RecBenchPlus(Benchmark):
    name = NAME
    answer_tokens = 160  # 12 titles with years and [SEP] (the ground-truth cap) take about 150
    row_type = RecBenchRow
    tasks = TASKS
    metrics = {
        "precision_at_k": MetricSpec("P@K"),  # K: the report's ``k``
        "recall_at_k": MetricSpec("R@K"),
        "ndcg_at_k": MetricSpec("NDCG@K"),
        "precision": MetricSpec("P"),
        "recall": MetricSpec("R"),
        "ndcg": MetricSpec("NDCG"),
        "cmr": MetricSpec("CMR"),
        "ftr": MetricSpec("FTR", higher_is_better=False),  # except on misinformed queries, where refusing is right
        "kg_coverage": MetricSpec("KG cov."),
        "repeated": MetricSpec("Rep.", higher_is_better=False),  # share of answers naming a title twice
        "distinct": MetricSpec("Distinct", scale="count"),  # distinct titles per answer
        "candidate_recall": MetricSpec("Cand. R"),  # grounded rows: the recall the candidate list allows
    }
    baselines = baseline_models.BASELINES
    baseline_metric = "ndcg"
    rewards = reward_functions.REWARDS
    default_rewards = reward_functions.DEFAULT_REWARDS
    label_columns = ("task", "ground_truth", "ground_truth_ids", "conditions")
    conventions = ("default", official.NAME)

    def messages(self, row: RecBenchRow, variant: dict) -> list[dict]:
        boxed = variant.get("protocol") == rerec.PROTOCOL
        grounded = bool(variant.get("candidates"))
        return prompts.build_messages(row, variant.get("with_history", False), variant.get("k"), grounded, boxed)

    def answer(self, row: RecBenchRow, variant: dict) -> str:
        boxed = variant.get("protocol") == rerec.PROTOCOL
        return prompts.answer_text(row, variant.get("k"), bool(variant.get("candidates")), boxed)

    def labels(self, rows: list[RecBenchRow]) -> list[dict]:
        labels = []
        for row in rows:
            label = {
                "task": row.task,
                "ground_truth": row.ground_truth,
                "ground_truth_ids": row.ground_truth_ids,
                "conditions": row.conditions,
            }
            if row.candidates is not None:  # grounded rows only: the from_candidates reward reads it
                label["candidate_ids"] = [candidate["id"] for candidate in row.candidates]
                if (ranks := row.candidate_ranks()) is not None:  # beyond_head reads them
                    label["candidate_ranks"] = ranks
            labels.append(label)
        return labels

    def label_problem(self, labels: dict) -> str | None:
        kinds = {"ground_truth": "strings", "ground_truth_ids": "strings", "conditions": "pairs",
                 "candidate_ids": "strings", "candidate_ranks": "numbers"}  # fmt: skip
        problem = label_kind_problem(labels, kinds, TASKS, optional=("candidate_ids", "candidate_ranks"))
        ranks, ids = labels.get("candidate_ranks"), labels.get("candidate_ids")
        if problem is None and ranks is not None and len(ranks) != len(ids or []):
            problem = f"field 'candidate_ranks': {len(ranks)} ranks for {len(ids or [])} candidate_ids"
        return problem

    def misled_lines(self, completion: str, labels: dict, resources: Resources) -> list[bool] | None:
        if not labels.get("candidate_ids"):
            return None  # closed book: no list to pick wrongly from
        items = resources.matcher().items
        shown = {item_id: items[item_id].title for item_id in labels["candidate_ids"] if item_id in items}
        return rerec.wrong_pick_lines(completion, set(labels.get("ground_truth_ids") or []), shown)

    def item_gains(self, completion: str, labels: dict, resources: Resources) -> list[tuple[int, float]] | None:
        truth, shown = set(labels.get("ground_truth_ids") or []), set(labels.get("candidate_ids") or [])
        k = resources.top_k or scoring.DEFAULT_K
        return ranks.item_gains(completion, truth, shown, k, resources.matcher())

    def load_scoring_files(self, tasks: set[str], resources: Resources) -> None:
        resources.matcher()
        resources.kg()

    def score(self, rows: list[RecBenchRow], predictions: dict[str, str], resources: Resources) -> Scored:
        if resources.variant.get("protocol") == rerec.PROTOCOL:  # one pick: the last boxed title, nothing else
            predictions = {row_id: rerec.boxed_answer(text) for row_id, text in predictions.items()}
        if resources.convention == official.NAME:
            entries, table = official.score_all(rows, predictions, resources.matcher(), resources.kg(), resources.top_k)
            report = {"metrics": list(official.METRICS), **scoring.aggregate(entries, official.summarize)}
            report["convention"] = (
                "official: the authors' evaluator (SequenceMatcher >= 0.8, books 0.65; FTR = no [SEP])"
            )
        else:
            k = resources.top_k or scoring.DEFAULT_K
            scores, table = scoring.score_all(rows, predictions, resources.matcher(), resources.kg(), k)
            entries = [vars(s).copy() for s in scores]
            report = {"metrics": list(self.metrics), "k": k, **scoring.aggregate(entries)}
            report["convention"] = "default: catalog-grounded (titles resolved to catalog items)"
        report["per_query"] = entries
        return Scored(report, table)

    def unit_values(self, record: dict) -> dict[str, float | None]:
        # the official convention's CMR is -1 where no recommended item is in the KG: left out, as theirs
        return {m: None if m == "cmr" and record.get(m) == official.NOT_FOUND else record.get(m) for m in self.metrics}

    def format_table(self, report: dict) -> str:
        return scoring.format_table(report)


BENCHMARK = RecBenchPlus()
