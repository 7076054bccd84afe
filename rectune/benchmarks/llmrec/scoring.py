"""LLMRec metrics, per task.

=================  =====================================================  ====================
task               target                                                 metrics
=================  =====================================================  ====================
``rating``         the star rating of the held-out item                   RMSE, MAE, N/A rate
``sequential``     the next item's title (optionally among candidates)    HR@k, NDCG@k (1,5,10)
``direct``         the held-out item among ``num_candidates`` candidates  HR@k, NDCG@k
``explanation``    the review text (first ``max_review_words`` words)     BLEU-4, ROUGE-1/2/L
``summarization``  the review title, given the review text                BLEU-4, ROUGE-1/2/L
=================  =====================================================  ====================

Ranked answers are read line by line and resolved to catalog items by the title matcher;
for rows with candidates only candidate items count. BLEU-4 is sacrebleu's corpus BLEU and
ROUGE the F-measures of Google's ``rouge-score``, both on a 0-100 scale. An answer is N/A
when nothing parses (no rating, no resolvable item, an empty text); N/A answers score as
misses (ranking), 0 (text) or are left out of RMSE/MAE (rating), and their rate is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rectune.benchmarks.llmrec.rows import RANKING_TASKS, TASKS, TEXT_TASKS, LLMRecRow
from rectune.data.ratings import parse_rating
from rectune.data.titles import TitleMatcher

KS = (1, 5, 10)


def ranked_items(text: str, matcher: TitleMatcher, candidate_ids: list[str] | None = None) -> list[str]:
    """Catalog ids the answer names, in order, restricted to the candidates when there are any."""
    ids = matcher.extract(text).item_ids
    if candidate_ids:
        allowed = set(candidate_ids)
        ids = [i for i in ids if i in allowed]
    return ids


def target_rank(text: str, matcher: TitleMatcher, target: str, candidate_ids: list[str] | None) -> int | None:
    """0-based position of ``target`` among the items the answer names, None when absent."""
    ranked = ranked_items(text, matcher, candidate_ids)
    return ranked.index(target) if target in ranked else None


def ndcg(rank: int | None, k: int) -> float:
    """NDCG@k of one relevant item at 0-based ``rank`` (None: not named): 1 / log2(rank + 2) within the top k."""
    return 1.0 / math.log2(rank + 2) if rank is not None and rank < k else 0.0


def text_scores(predictions: list[str], references: list[str]) -> dict[str, float]:
    """Corpus BLEU-4 (sacrebleu) and mean ROUGE-1/2/L F-measures (rouge-score), 0-100."""
    import sacrebleu
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"])
    rouge = [scorer.score(ref, pred) for pred, ref in zip(predictions, references, strict=True)]
    n = len(predictions)
    return {
        "bleu4": sacrebleu.corpus_bleu(predictions, [references]).score,
        **{name: 100 * sum(r[name].fmeasure for r in rouge) / n for name in ("rouge1", "rouge2", "rougeL")},
    }


@dataclass
class QueryScore:
    id: str
    task: str
    na: bool
    error: float | None = None  # rating: prediction - truth
    rank: int | None = None  # ranking: 0-based position of the target, None if absent
    text: str | None = None  # text tasks: the cleaned answer


def score_queries(rows: list[LLMRecRow], predictions: dict[str, str], matcher: TitleMatcher | None) -> list[QueryScore]:
    scores = []
    for row in rows:
        text = predictions[row.id]
        if row.task == "rating":
            value = parse_rating(text)
            error = None if value is None else value - float(row.target)
            scores.append(QueryScore(row.id, row.task, value is None, error=error))
        elif row.task in RANKING_TASKS:
            ranked = ranked_items(text, matcher, [c["id"] for c in row.candidates or []])
            rank = ranked.index(row.item["id"]) if row.item["id"] in ranked else None
            scores.append(QueryScore(row.id, row.task, not ranked, rank=rank))
        else:
            cleaned = text.strip()
            scores.append(QueryScore(row.id, row.task, not cleaned, text=cleaned))
    return scores


def summarize(task: str, scores: list[QueryScore], references: list[str]) -> dict:
    n = len(scores)
    summary: dict = {"n": n, "na_rate": sum(s.na for s in scores) / n}
    if task == "rating":
        errors = [s.error for s in scores if s.error is not None]
        summary["rmse"] = math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else None
        summary["mae"] = sum(abs(e) for e in errors) / len(errors) if errors else None
    elif task in RANKING_TASKS:
        for k in KS:
            found = [s.rank for s in scores if s.rank is not None and s.rank < k]
            summary[f"hr@{k}"] = len(found) / n
            summary[f"ndcg@{k}"] = sum(ndcg(rank, k) for rank in found) / n
    else:
        summary.update(text_scores([s.text or "" for s in scores], references))
    return summary


def aggregate(scores: list[QueryScore], rows: list[LLMRecRow]) -> dict:
    targets = {r.id: r.target for r in rows}
    report: dict = {"by_task": {}}
    for task in TASKS:
        task_scores = [s for s in scores if s.task == task]
        if task_scores:
            report["by_task"][task] = summarize(task, task_scores, [targets[s.id] for s in task_scores])
    n = len(scores)
    report["overall"] = {"n": n, "na_rate": sum(s.na for s in scores) / n if n else None}
    return report


def format_table(report: dict) -> str:
    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}" if value < 10 else f"{value:.2f}"

    groups = [
        (("rating",), ("rmse", "mae")),
        (RANKING_TASKS, tuple(f"{m}@{k}" for m in ("hr", "ndcg") for k in KS)),
        (TEXT_TASKS, ("bleu4", "rouge1", "rouge2", "rougeL")),
    ]
    tables = []
    for tasks, metrics in groups:
        present = [t for t in tasks if t in report["by_task"]]
        if not present:
            continue
        header = ["task", "n", *(m.upper() if m in ("rmse", "mae") else m for m in metrics), "N/A"]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for task in present:
            summary = report["by_task"][task]
            values = [cell(summary[m]) for m in (*metrics, "na_rate")]
            lines.append(f"| {task} | {summary['n']} | " + " | ".join(values) + " |")
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def query_table(rows: list[LLMRecRow], predictions: dict[str, str], scores: list[QueryScore]) -> list[dict]:
    return [
        {
            "id": row.id,
            "task": row.task,
            "target": row.target,
            "completion": predictions[row.id],
            "na": score.na,
            "error": score.error,
            "rank": score.rank,
        }
        for row, score in zip(rows, scores, strict=True)
    ]
