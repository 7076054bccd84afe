"""RecBench+ metrics (paper §3.1.2): Precision, Recall, Condition Match Rate, Fail-to-Recommend.

Conventions, per query:

* recommended items = the completion's resolved catalog items plus its unresolved mentions
  (hallucinations, always wrong), duplicates collapsed;
* ground truth = the row's resolved ids plus the normalised keys of ground-truth titles the
  catalog lacks (so such a title can still be hit by name);
* precision = hits / recommended, recall = hits / ground truth;
* CMR = recommended items that meet every condition in the KG / recommended items, for
  condition-based tasks only (explicit, implicit, misinformed; misinformed rows are checked
  against their true conditions); items the KG knows nothing about count as not matching,
  and ``kg_coverage`` (share of resolved recommended items whose every condition relation
  the KG covers) is reported beside CMR so a low coverage flags an unreliable CMR;
* NDCG = sum of 1/log2(i + 2) over the positions of hits in the recommended list (in the
  order named, duplicates collapsed) / the same sum over |ground truth| positions, as the paper;
* at a fixed K (the prompt's K, else ``DEFAULT_K``): the first K distinct items named; P@K = hits
  among them / K (an answer naming fewer than K items cannot score higher by it), R@K = those hits /
  |ground truth|, NDCG@K = their gain / the gain of min(K, |ground truth|) hits; naming more than K
  items changes none of them;
* candidate recall (grounded rows only): the share of the ground truth among the row's candidates,
  the most recall an answer chosen from them can reach;
* an empty answer has P = R = NDCG = CMR = 0 and FTR = 1. FTR is lower-is-better except on
  misinformed queries, where refusing is the right answer.

How these differ from the authors' evaluator (:mod:`~rectune.benchmarks.recbench.official`, which
``--metrics official`` reproduces): titles are resolved to catalog items (alternate titles,
``Usual Suspects, The``, years that only disambiguate) instead of a 0.8 string similarity against
the ground-truth spelling, so a correct short title such as ``Casablanca`` counts; FTR means no
title was recognised, where theirs means no ``[SEP]`` in the answer; a title the catalog lacks is a
wrong recommendation (it lowers precision and CMR), where theirs leaves it out of CMR; duplicates
count once.

Aggregates are macro averages over queries: overall, per task and per condition count
(``1``, ``2``, ``3-4``) within each task. Overall CMR averages condition-based queries only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

from rectune.benchmarks.recbench.rows import RecBenchRow
from rectune.data.catalog import KnowledgeGraph
from rectune.data.titles import Extraction, TitleMatcher, split_title, title_key

METRICS = ("precision_at_k", "recall_at_k", "ndcg_at_k", "precision", "recall", "ndcg", "cmr", "ftr", "kg_coverage",
           "repeated", "distinct", "candidate_recall")  # fmt: skip
DEFAULT_K = 5  # the K of the @K metrics when the prompt asks for no fixed number


@dataclass
class QueryScore:
    id: str
    task: str
    condition_bucket: str | None
    precision: float
    recall: float
    ndcg: float
    cmr: float | None
    ftr: float
    n_recommended: int
    n_hits: int
    n_resolved: int
    n_kg_covered: int
    repeated: float  # 1.0 when the answer names a title more than once (degenerate answers), else 0.0
    distinct: int  # distinct titles recommended
    precision_at_k: float = 0.0
    recall_at_k: float = 0.0
    ndcg_at_k: float = 0.0
    candidate_recall: float | None = None  # grounded rows: ground truth among the candidates


def ground_truth_set(row: RecBenchRow, matcher: TitleMatcher) -> set[str]:
    truth = set(row.ground_truth_ids)
    for title in row.ground_truth:
        if matcher.resolve(title) is None:
            truth.add(title_key(split_title(title)[0]) or title_key(title))
    return truth


def condition_bucket(row: RecBenchRow) -> str | None:
    if not row.is_condition_based:
        return None
    return "3-4" if row.condition_num >= 3 else str(row.condition_num)


_DISCOUNTS = [1 / math.log2(i + 2) for i in range(64)]  # 1 / log2(rank + 1), extended on demand


def discounts(n: int) -> list[float]:
    """The first ``n`` rank discounts, 1 / log2(i + 2) for i < n."""
    while len(_DISCOUNTS) < n:
        _DISCOUNTS.append(1 / math.log2(len(_DISCOUNTS) + 2))
    return _DISCOUNTS[:n]


def dcg(ranked: list[str], truth: set[str]) -> float:
    return sum(d for d, item in zip(discounts(len(ranked)), ranked, strict=True) if item in truth)


def candidate_recall(row: RecBenchRow, truth: set[str]) -> float | None:
    if row.candidates is None or not truth:
        return None
    return len(truth & {candidate["id"] for candidate in row.candidates}) / len(truth)


def score_query(
    row: RecBenchRow, extraction: Extraction, matcher: TitleMatcher, kg: KnowledgeGraph, k: int = DEFAULT_K
) -> QueryScore:
    truth = ground_truth_set(row, matcher)
    top_k = extraction.ranked[:k]
    hits_at_k = sum(item in truth for item in top_k)
    ideal_at_k = sum(discounts(min(k, len(truth))))
    recommended = extraction.item_ids + extraction.unresolved
    hits = sum(item in truth for item in recommended)
    n_rec = len(recommended)
    ideal = sum(discounts(len(truth)))
    gain = dcg(extraction.ranked, truth)
    cmr = None
    covered = 0
    if row.is_condition_based:
        matched, covered = kg.count_met(extraction.item_ids, row.conditions)
        cmr = matched / n_rec if n_rec else 0.0
    return QueryScore(
        id=row.id,
        task=row.task,
        condition_bucket=condition_bucket(row),
        precision=hits / n_rec if n_rec else 0.0,
        recall=hits / len(truth) if truth else 0.0,
        ndcg=gain / ideal if ideal else 0.0,
        cmr=cmr,
        ftr=0.0 if n_rec else 1.0,
        n_recommended=n_rec,
        n_hits=hits,
        n_resolved=len(extraction.item_ids),
        n_kg_covered=covered,
        repeated=1.0 if extraction.named > n_rec else 0.0,
        distinct=n_rec,
        precision_at_k=hits_at_k / k,
        recall_at_k=hits_at_k / len(truth) if truth else 0.0,
        ndcg_at_k=dcg(top_k, truth) / ideal_at_k if ideal_at_k else 0.0,
        candidate_recall=candidate_recall(row, truth),
    )


def score_all(
    rows: list[RecBenchRow], predictions: dict[str, str], matcher: TitleMatcher, kg: KnowledgeGraph, k: int = DEFAULT_K
) -> tuple[list[QueryScore], Callable[[], list[dict]]]:
    """Every row's score, from one parse of each completion, and what builds their table records (a
    record holds what the query asked, what came back, what it resolved to and how it scored)."""
    extractions = matcher.extract_many([predictions[row.id] for row in rows])
    scores = [score_query(row, extraction, matcher, kg, k) for row, extraction in zip(rows, extractions, strict=True)]
    return scores, functools.partial(query_table, rows, predictions, extractions, scores, matcher)


def query_table(
    rows: list[RecBenchRow],
    predictions: dict[str, str],
    extractions: list[Extraction],
    scores: list[QueryScore],
    matcher: TitleMatcher,
) -> list[dict]:
    """One record per query: what it asked, what came back, what that resolved to and how it scored."""
    return [
        {
            "id": row.id,
            "task": row.task,
            "query": row.query,
            "ground_truth": "\n".join(row.ground_truth),
            "completion": predictions[row.id],
            "resolved": "\n".join(matcher.items[i].title for i in extraction.item_ids),
            "unresolved": "\n".join(extraction.unresolved),
            "precision": score.precision,
            "recall": score.recall,
            "ndcg": score.ndcg,
            "cmr": score.cmr,
            "ftr": score.ftr,
            "precision_at_k": score.precision_at_k,
            "recall_at_k": score.recall_at_k,
            "ndcg_at_k": score.ndcg_at_k,
            "repeated": score.repeated,
            "distinct": score.distinct,
        }
        for row, extraction, score in zip(rows, extractions, scores, strict=True)
    ]


def summarize(scores: list[dict]) -> dict:
    """Macro averages of one group of per-query entries."""
    n = len(scores)
    summary: dict = {"n": n}
    for metric in ("precision_at_k", "recall_at_k", "ndcg_at_k", "precision", "recall", "ndcg", "ftr", "repeated",
                   "distinct"):  # fmt: skip
        summary[metric] = sum(s.get(metric, 0.0) for s in scores) / n if n else None
    grounded = [s["candidate_recall"] for s in scores if s.get("candidate_recall") is not None]
    summary["candidate_recall"] = sum(grounded) / len(grounded) if grounded else None
    with_cmr = [s for s in scores if s["cmr"] is not None]
    summary["cmr"] = sum(s["cmr"] for s in with_cmr) / len(with_cmr) if with_cmr else None
    resolved = sum(s["n_resolved"] for s in with_cmr)
    summary["kg_coverage"] = sum(s["n_kg_covered"] for s in with_cmr) / resolved if resolved else None
    summary["avg_recommended"] = sum(s["n_recommended"] for s in scores) / n if n else None
    return summary


def aggregate(scores: list[dict], summarize: Callable[[list[dict]], dict] = summarize) -> dict:
    """Report with ``overall``, ``by_task`` and ``by_task_conditions`` summaries of per-query entries."""
    by_task: dict[str, list[dict]] = {}
    for score in scores:
        by_task.setdefault(score["task"], []).append(score)
    by_conditions: dict[str, dict[str, dict]] = {}
    for task, task_scores in by_task.items():
        buckets: dict[str, list[dict]] = {}
        for score in task_scores:
            if score["condition_bucket"] is not None:
                buckets.setdefault(score["condition_bucket"], []).append(score)
        if buckets:
            by_conditions[task] = {b: summarize(s) for b, s in sorted(buckets.items())}
    return {
        "overall": summarize(scores),
        "by_task": {task: summarize(s) for task, s in by_task.items()},
        "by_task_conditions": by_conditions,
    }


LABELS = {"precision": "P", "recall": "R", "ndcg": "NDCG", "cmr": "CMR", "ftr": "FTR", "kg_coverage": "KG cov.",
          "repeated": "Rep.", "distinct": "Distinct", "precision_at_k": "P@K", "recall_at_k": "R@K",
          "ndcg_at_k": "NDCG@K", "candidate_recall": "Cand. R"}  # fmt: skip


def format_table(report: dict) -> str:
    """Plain-text (Markdown) table of a report's per-task and overall rows, in the report's metrics."""
    metrics = report.get("metrics", METRICS)
    k = f"@{report['k']}" if report.get("k") else "@K"
    lines = [
        "| task | n | " + " | ".join(LABELS.get(m, m).replace("@K", k) for m in metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    rows = list(report["by_task"].items()) + [("overall", report["overall"])]
    for name, summary in rows:
        values = " | ".join(cell(summary.get(m)) for m in metrics)
        lines.append(f"| {name} | {summary['n']} | {values} |")
    return "\n".join(lines)
