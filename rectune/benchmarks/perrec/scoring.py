"""PerRecBench scoring: Kendall's τ-b per group between true relative ratings and the predicted order.

A group with an unparseable answer is a failure: it counts τ = 0 in ``tau`` and is left out of
``tau_parsed``; ``failure_rate`` reports the share. Reports break results down by format,
difficulty and group size.

Position-fair: every pair is asked in both orders and every listwise group in its stored order and
reversed (``rows``), and the answers are added up: a pair's user wins 2, 1 or 0 of its two prompts, so an
answer that follows position (``A`` both times) ties the pair, i.e. a pair counts only where the two
orders agree; a listwise user's score is minus the sum of their places in both orders. ``position_following``
is the share of answered pairs whose two answers name the same letter, and of listwise groups whose two
answers put the same letter, and so different users, first (a model that ignores position and has a
preference scores 0; one that always answers ``A`` scores 1; a coin toss about 0.5 on pairs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rectune.benchmarks.perrec.prompts import parse_choice, parse_ranking
from rectune.benchmarks.perrec.rows import DIFFICULTIES, TASKS, PerRecRow
from rectune.data.ratings import parse_rating


def tau(truth: list[float], predicted: list[float]) -> float:
    """Kendall's τ-b; a constant prediction (no order at all) scores 0."""
    from scipy.stats import kendalltau  # here: data_prep imports this benchmark and never scores

    value = kendalltau(truth, predicted).statistic
    return 0.0 if value is None or math.isnan(value) else float(value)


@dataclass
class GroupScore:
    group: str
    task: str
    difficulty: str
    group_size: int
    tau: float
    failed: bool
    position_following: float | None = None


def _predicted_scores(task: str, rows: list[PerRecRow], completions: list[str]) -> dict[str, float] | None:
    """User -> predicted preference score (higher = liked more), or None if any answer is unparseable."""
    scores: dict[str, float] = {}
    for row, text in zip(rows, completions, strict=True):
        if task == "pointwise":
            rating = parse_rating(text)
            if rating is None:
                return None
            user = row.users[0]
            scores[user["user"]] = rating - user["mean_rating"]
        elif task == "pairwise":
            choice = parse_choice(text)
            if choice is None:
                return None
            for user in row.users:
                scores[user["user"]] = scores.get(user["user"], 0.0) + (user["label"] == choice)
        else:
            order = parse_ranking(text, [u["label"] for u in row.users])
            if order is None:
                return None
            position = {label: i for i, label in enumerate(order)}
            for user in row.users:
                scores[user["user"]] = scores.get(user["user"], 0.0) - position[user["label"]]
    return scores


def position_following(task: str, rows: list[PerRecRow], completions: list[str]) -> float | None:
    """Pairwise: the share of pairs with both orders answered whose answers name the same letter; listwise: 1.0
    when both orders' answers put the same letter, and so different users, first (a group's middle user keeps
    its letter when the order is reversed), else 0.0; None for pointwise or nothing to compare."""
    if task == "pairwise":
        answers: dict[frozenset, list[str | None]] = {}
        for row, text in zip(rows, completions, strict=True):
            answers.setdefault(frozenset(u["user"] for u in row.users), []).append(parse_choice(text))
        both = [pair for pair in answers.values() if len(pair) == 2 and None not in pair]
        return sum(pair[0] == pair[1] for pair in both) / len(both) if both else None
    if task == "listwise":
        pairs = zip(rows, completions, strict=True)
        orders = [parse_ranking(text, [u["label"] for u in row.users]) for row, text in pairs]
        if len(orders) != 2 or None in orders:
            return None
        first_users = {
            next(u["user"] for u in row.users if u["label"] == order[0])
            for row, order in zip(rows, orders, strict=True)
        }
        return float(orders[0][0] == orders[1][0] and len(first_users) == 2)
    return None


def score_groups(rows: list[PerRecRow], predictions: dict[str, str]) -> list[GroupScore]:
    by_group: dict[tuple[str, str], list[PerRecRow]] = {}
    for row in rows:
        by_group.setdefault((row.task, row.group), []).append(row)
    scores = []
    for (task, group), members in by_group.items():
        truth = {u["user"]: u["relative_rating"] for row in members for u in row.users}
        if len(truth) < 2:
            continue  # a group cut by --limit to one user has no order to score
        completions = [predictions[r.id] for r in members]
        predicted = _predicted_scores(task, members, completions)
        value = 0.0 if predicted is None else tau([truth[u] for u in truth], [predicted[u] for u in truth])
        first = members[0]
        following = position_following(task, members, completions)
        scores.append(GroupScore(group, task, first.difficulty, len(truth), value, predicted is None, following))
    return scores


def summarize(scores: list[GroupScore]) -> dict:
    parsed = [s.tau for s in scores if not s.failed]
    following = [s.position_following for s in scores if s.position_following is not None]
    n = len(scores)
    return {
        "n": n,
        "tau": sum(s.tau for s in scores) / n if n else None,
        "tau_parsed": sum(parsed) / len(parsed) if parsed else None,
        "failure_rate": (n - len(parsed)) / n if n else None,
        "position_following": sum(following) / len(following) if following else None,
    }


METRICS = ("tau", "tau_parsed", "failure_rate", "position_following")


def aggregate(scores: list[GroupScore]) -> dict:
    """``overall``, ``by_task`` (format) and ``by_task_difficulty`` / ``by_task_size`` summaries over groups."""
    report: dict = {"overall": summarize(scores), "by_task": {}}
    report["by_task_difficulty"], report["by_task_size"] = {}, {}
    for task in TASKS:
        task_scores = [s for s in scores if s.task == task]
        if not task_scores:
            continue
        report["by_task"][task] = summarize(task_scores)
        report["by_task_difficulty"][task] = {
            d: summarize([s for s in task_scores if s.difficulty == d])
            for d in DIFFICULTIES
            if any(s.difficulty == d for s in task_scores)
        }
        sizes = sorted({s.group_size for s in task_scores})
        report["by_task_size"][task] = {str(n): summarize([s for s in task_scores if s.group_size == n]) for n in sizes}
    return report


def format_table(report: dict) -> str:
    header = "| format | difficulty | groups | τ | τ (parsed) | failures | by position |"
    lines = [header, "|---|---|---|---|---|---|---|"]

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for task, summary in report["by_task"].items():
        for tier, tier_summary in [("all", summary), *report["by_task_difficulty"][task].items()]:
            values = " | ".join(cell(tier_summary[m]) for m in METRICS)
            lines.append(f"| {task} | {tier} | {tier_summary['n']} | {values} |")
    overall = report["overall"]
    lines.append(f"| overall | all | {overall['n']} | " + " | ".join(cell(overall[m]) for m in METRICS) + " |")
    return "\n".join(lines)


def query_table(rows: list[PerRecRow], predictions: dict[str, str], scores: list[GroupScore]) -> list[dict]:
    by_group = {(s.task, s.group): s for s in scores}
    return [
        {
            "id": row.id,
            "task": row.task,
            "difficulty": row.difficulty,
            "item": row.item["title"],
            "answer": row.answer,
            "completion": predictions[row.id],
            # a group cut to one user (evaluate/run.py --limit) has no order and no score
            "group_tau": getattr(by_group.get((row.task, row.group)), "tau", None),
            "group_failed": getattr(by_group.get((row.task, row.group)), "failed", None),
        }
        for row in rows
    ]
