"""LLMRec's five tasks (seed 003) on Amazon-style reviews: data, prompts, metrics and rewards.

Data (:func:`build_rows`): a user's first review of an item counts once; users and items are
filtered to the ``min_interactions``-core (5 by default: repeated until every user and item
has at least 5); each user's reviews are ordered by time and split leave-one-out: the last
one is the test target, the one before it the training target, each with the reviews before
it as history (the last ``history`` of them in the prompt).

Prompts have LLMRec's three parts: a task description, the behaviour injection (the user's
history, oldest first, with ratings) and a format indicator.

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
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from rectune.perrec import parse_rating
from rectune.ratings import ItemInfo, Review, item_title
from rectune.schema import LLMREC_TASKS, LLMRecRow
from rectune.titles import CatalogItem, TitleMatcher

KS = (1, 5, 10)
RANKING_TASKS = ("sequential", "direct")
TEXT_TASKS = ("explanation", "summarization")
SYSTEM_PROMPT = "You are a recommender system for an online shop. Follow the format you are asked for exactly."
DESCRIPTIONS = {
    "rating": "Predict the rating the user will give to the item below, from their earlier reviews.",
    "sequential": "Predict the next item the user will review, from the items they reviewed so far.",
    "direct": "Recommend the item the user is most likely to review next, from the candidates below.",
    "explanation": "Write the review the user would write about the item below: why they would like it or not.",
    "summarization": "Write a short title for the user's review below.",
}
FORMATS = {
    "rating": "Answer with a single number from 1 to 5.",
    "sequential": "Answer with up to 10 item titles, one per line, most likely first.",
    "direct": "Answer with up to 10 candidate titles, one per line, most likely first.",
    "explanation": "Answer with the review text only.",
    "summarization": "Answer with the title only.",
}


@dataclass
class BuildSettings:
    min_interactions: int = 5
    history: int = 10
    num_candidates: int = 20
    sequential_candidates: bool = False
    max_review_words: int = 64


def k_core(reviews: list[Review], k: int) -> list[Review]:
    """First review per (user, item), then drop users and items with fewer than ``k`` until none is left."""
    seen, unique = set(), []
    for review in sorted(reviews, key=lambda r: (r.timestamp, r.user, r.item)):
        if (review.user, review.item) not in seen:
            seen.add((review.user, review.item))
            unique.append(review)
    while True:
        users = Counter(r.user for r in unique)
        items = Counter(r.item for r in unique)
        kept = [r for r in unique if users[r.user] >= k and items[r.item] >= k]
        if len(kept) == len(unique):
            return kept
        unique = kept


def _words(text: str, limit: int) -> str:
    return " ".join(text.split()[:limit])


def _entry(review: Review, items: dict[str, ItemInfo]) -> dict:
    return {"id": review.item, "title": item_title(items, review.item), "rating": review.rating}


def user_rows(
    user: str,
    events: list[Review],
    items: dict[str, ItemInfo],
    domain: str,
    settings: BuildSettings,
    rng: random.Random,
    all_items: list[str],
    reviewed: set[str],
) -> list[LLMRecRow]:
    """The five tasks for the review ``events[-1]`` with the reviews before it as history.

    Negative candidates are items the user never reviewed (``reviewed`` covers later reviews too)."""
    target = events[-1]
    history = [_entry(r, items) for r in events[:-1][-settings.history :]]
    item = {"id": target.item, "title": item_title(items, target.item)}

    def candidates() -> list[dict]:
        pool = [i for i in all_items if i not in reviewed]
        chosen = rng.sample(pool, min(settings.num_candidates - 1, len(pool))) + [target.item]
        rng.shuffle(chosen)
        return [{"id": i, "title": item_title(items, i)} for i in chosen]

    def row(task: str, answer: str, **extra) -> LLMRecRow:
        return LLMRecRow(f"{task}/{user}", "llmrec", domain, task, user, history, item, answer, **extra)

    rows = [
        row("rating", str(int(target.rating)) if target.rating.is_integer() else str(target.rating)),
        row("sequential", item["title"], candidates=candidates() if settings.sequential_candidates else None),
        row("direct", item["title"], candidates=candidates()),
    ]
    if target.text.strip():
        rows.append(row("explanation", _words(target.text, settings.max_review_words)))
        if target.title.strip():
            rows.append(row("summarization", target.title.strip(), review=target.text.strip()))
    return rows


def build_rows(
    reviews: list[Review], items: dict[str, ItemInfo], domain: str, settings: BuildSettings, seed: int
) -> tuple[list[LLMRecRow], list[LLMRecRow], list[Review]]:
    """Training rows (second-to-last review), test rows (last review) and the k-core reviews."""
    kept = k_core(reviews, settings.min_interactions)
    by_user: dict[str, list[Review]] = {}
    for review in kept:
        by_user.setdefault(review.user, []).append(review)
    all_items = sorted({r.item for r in kept})
    rng = random.Random(seed)
    train, test = [], []
    for user in sorted(by_user):
        events = by_user[user]
        reviewed = {r.item for r in events}
        train += user_rows(user, events[:-1], items, domain, settings, rng, all_items, reviewed)
        test += user_rows(user, events, items, domain, settings, rng, all_items, reviewed)
    return train, test, kept


def catalog(reviews: list[Review], items: dict[str, ItemInfo]) -> list[CatalogItem]:
    return [CatalogItem(i, item_title(items, i)) for i in sorted({r.item for r in reviews})]


def build_messages(row: LLMRecRow) -> list[dict]:
    """Task description, behaviour injection (history), format indicator."""
    parts = [DESCRIPTIONS[row.task]]
    if row.history:
        lines = [f"{i}. {h['title']}" + (f" (rated {h['rating']:g})" if "rating" in h else "") for i, h in
                 enumerate(row.history, start=1)]  # fmt: skip
        parts.append("The user's earlier reviews, oldest first:\n" + "\n".join(lines))
    if row.task in ("rating", "explanation", "summarization"):
        parts.append(f"Item: {row.item['title']}")
    if row.task == "summarization":
        parts.append(f"Review: {row.review}")
    if row.candidates:
        parts.append("Candidates:\n" + "\n".join(c["title"] for c in row.candidates))
    parts.append(FORMATS[row.task])
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


def sft_example(row: LLMRecRow) -> dict:
    return {"messages": [*build_messages(row), {"role": "assistant", "content": row.target}]}


def rft_example(row: LLMRecRow) -> dict:
    return {
        "prompt": build_messages(row),
        "id": row.id,
        "benchmark": "llmrec",
        "task": row.task,
        "target": row.target,
        "item_id": row.item["id"],
        "candidate_ids": [c["id"] for c in row.candidates or []],
    }


# Metrics ------------------------------------------------------------------------------------------


def ranked_items(text: str, matcher: TitleMatcher, candidate_ids: list[str] | None = None) -> list[str]:
    """Catalog ids the answer names, in order, restricted to the candidates when there are any."""
    ids = matcher.extract(text).item_ids
    if candidate_ids:
        allowed = set(candidate_ids)
        ids = [i for i in ids if i in allowed]
    return ids


def hit_and_ndcg(ranked: list[str], target: str, k: int) -> tuple[float, float]:
    if target not in ranked[:k]:
        return 0.0, 0.0
    return 1.0, 1.0 / math.log2(ranked.index(target) + 2)


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
            summary[f"ndcg@{k}"] = sum(1 / math.log2(rank + 2) for rank in found) / n
    else:
        summary.update(text_scores([s.text or "" for s in scores], references))
    return summary


METRICS = ("rmse", "mae", *(f"{m}@{k}" for k in KS for m in ("hr", "ndcg")), "bleu4", "rouge1", "rouge2", "rougeL",
           "na_rate")  # fmt: skip


def aggregate(scores: list[QueryScore], rows: list[LLMRecRow]) -> dict:
    targets = {r.id: r.target for r in rows}
    report: dict = {"metrics": list(METRICS), "by_task": {}}
    for task in LLMREC_TASKS:
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


# Rewards -------------------------------------------------------------------------------------------


def reward_rules(matcher: TitleMatcher) -> dict[str, Callable[..., float]]:
    """``task``: the task's own metric for one completion (rating: 1 - |error| / 4, N/A -1; ranking:
    NDCG@10; text: ROUGE-L F); ``format``: 1 when the answer parses, else 0."""
    from rouge_score import rouge_scorer

    rouge = rouge_scorer.RougeScorer(["rougeL"])

    def task_reward(task: str, text: str, target: str, item_id: str, candidate_ids: list[str]) -> float:
        if task == "rating":
            value = parse_rating(text)
            return -1.0 if value is None else 1.0 - abs(value - float(target)) / 4.0
        if task in RANKING_TASKS:
            return hit_and_ndcg(ranked_items(text, matcher, candidate_ids), item_id, 10)[1]
        return rouge.score(target, text.strip())["rougeL"].fmeasure if text.strip() else 0.0

    def format_reward(task: str, text: str, target: str, item_id: str, candidate_ids: list[str]) -> float:
        if task == "rating":
            return float(parse_rating(text) is not None)
        if task in RANKING_TASKS:
            return float(bool(ranked_items(text, matcher, candidate_ids)))
        return float(bool(text.strip()))

    return {"task": task_reward, "format": format_reward}


DEFAULT_REWARDS = ["task", "format"]
REWARD_COLUMNS = ("target", "item_id", "candidate_ids")
