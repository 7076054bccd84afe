"""GRPO rewards for LLMRec, in TRL's signature over the ``train_rft_*.jsonl`` label columns.

Columns: ``task``, ``target`` (the reference answer), ``item_id`` (the held-out item) and
``candidate_ids`` (the candidates shown, empty when none). Ranking answers are resolved against
the catalog (``resources``, bound by RecTune).
"""

from __future__ import annotations

from rectune.benchmarks.llmrec.rows import RANKING_TASKS
from rectune.benchmarks.llmrec.scoring import ndcg, ranked_items, target_rank
from rectune.data.completions import completion_text
from rectune.data.ratings import parse_rating


def task(completions, task, target, item_id, candidate_ids, *, resources, **kwargs) -> list[float]:
    """Each task's own metric for one completion.

    Rating: 1 - |error| / 4, N/A -1 ("4" for a true 5 = 0.75). Ranking: NDCG@10 of the held-out
    item (named second = 1 / log2(3) = 0.631). Text: ROUGE-L F against the reference (0 when empty).
    """
    from rouge_score import rouge_scorer

    rouge = rouge_scorer.RougeScorer(["rougeL"])
    values = []
    for i, completion in enumerate(completions):
        text = completion_text(completion)
        if task[i] == "rating":
            value = parse_rating(text)
            values.append(-1.0 if value is None else 1.0 - abs(value - float(target[i])) / 4.0)
        elif task[i] in RANKING_TASKS:
            values.append(ndcg(target_rank(text, resources.matcher(), item_id[i], candidate_ids[i]), 10))
        else:
            values.append(rouge.score(target[i], text.strip())["rougeL"].fmeasure if text.strip() else 0.0)
    return values


def format(completions, task, target, item_id, candidate_ids, *, resources, **kwargs) -> list[float]:
    """1.0 when the answer parses for its task (a rating; a catalog item, among the candidates if any;
    any text), else 0.0. ``"five stars"`` for a rating task = 0.0, ``"4"`` = 1.0."""
    values = []
    for i, completion in enumerate(completions):
        text = completion_text(completion)
        if task[i] == "rating":
            values.append(float(parse_rating(text) is not None))
        elif task[i] in RANKING_TASKS:
            values.append(float(bool(ranked_items(text, resources.matcher(), candidate_ids[i]))))
        else:
            values.append(float(bool(text.strip())))
    return values


REWARDS = {"task": task, "format": format}
DEFAULT_REWARDS = ("task", "format")
