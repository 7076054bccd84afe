"""PerRecBench: grouped ranking of users by how much they liked a shared item.

Construction (:func:`build_groups`), following the paper (seed 002):

* relative rating = the user's rating of the item − the user's mean rating (all their ratings);
* eligible users have at least ``min_history`` (20) other rated items;
* a group is a set of eligible users who rated the same item within ``window_days`` (7) of
  the group's first rating, whose relative ratings differ pairwise by more than ``min_gap``
  (0.6), of 2 to ``max_size`` (4) users. Per item, ratings are taken in time order: the first
  unused rating opens a window, the users in it join greedily in time order while they keep
  every pairwise gap above ``min_gap``, and the window's users that joined are used up;
* each user's history in the prompt is the top-``k`` (4) of their other items by BM25 against
  the shared item's title and categories (IDF over all items), most recent first on ties;
* difficulty: one point per user beyond two, plus one when the closest two relative ratings
  are less than ``close_gap`` (1.0) apart; 0 points = ``easy``, 1 = ``medium``, 2+ = ``hard``.
  Group size is what the paper found drives difficulty (τ 0.20 → 0.06 at 4+ users); the
  closest gap adds the near-ties that make a single comparison hard.

Formats: ``pointwise`` (one row per user: predict the rating; users are ranked by prediction −
their mean), ``pairwise`` (one row per pair: which of A and B liked it more; a group's users
are ranked by pairs won), ``listwise`` (one row: rank all users, ``"B > A > C"``).
Scoring: Kendall's τ-b (scipy) between the true relative ratings and the predicted order, per
group; a group with an unparseable answer is a failure: it counts τ = 0 in ``tau`` and is
left out of ``tau_parsed``; ``failure_rate`` reports the share.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations

from scipy.stats import kendalltau

from rectune.ratings import ItemInfo, Review, item_title
from rectune.schema import PERREC_TASKS, PerRecRow

LABELS = "ABCDEFGH"
SYSTEM_PROMPT = (
    "You are a personalised recommender system. You judge how much users like an item compared with their "
    "usual taste, from their profiles and their ratings of related items."
)
INSTRUCTIONS = {
    "pointwise": "How would the user rate the item on a 1-5 scale? Answer with the rating only.",
    "pairwise": "Which user liked the item more, relative to their own average rating? Answer with A or B only.",
    "listwise": (
        "Rank the users from the one who liked the item most, relative to their own average rating, to the one "
        'who liked it least. Answer with the letters only, e.g. "B > A > C".'
    ),
}


@dataclass
class GroupSettings:
    window_days: float = 7.0
    min_history: int = 20
    min_gap: float = 0.6
    max_size: int = 4
    close_gap: float = 1.0
    k: int = 4
    profile: bool = True


@dataclass
class Member:
    user: str
    rating: float
    relative: float
    timestamp: int


@dataclass
class Group:
    id: str
    item: str
    members: list[Member]
    difficulty: str = ""
    users: list[dict] = field(default_factory=list)  # prompt blocks, in label order


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.casefold())


def _item_text(info: ItemInfo | None, item_id: str) -> str:
    return f"{info.title} {' '.join(info.categories)}" if info else item_id


class BM25:
    """Okapi BM25 (k1 1.5, b 0.75) with document frequencies over the whole item collection."""

    def __init__(self, documents: dict[str, list[str]], k1: float = 1.5, b: float = 0.75):
        self.documents, self.k1, self.b = documents, k1, b
        self.avg_length = sum(map(len, documents.values())) / max(len(documents), 1)
        df = Counter(token for tokens in documents.values() for token in set(tokens))
        n = len(documents)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def score(self, query: list[str], doc_id: str) -> float:
        tokens = self.documents.get(doc_id, [])
        counts = Counter(tokens)
        norm = self.k1 * (1 - self.b + self.b * len(tokens) / (self.avg_length or 1))
        return sum(
            self.idf.get(t, 0.0) * counts[t] * (self.k1 + 1) / (counts[t] + norm) for t in set(query) if counts[t]
        )


def difficulty(relatives: list[float], close_gap: float) -> str:
    ordered = sorted(relatives)
    closest = min(b - a for a, b in zip(ordered, ordered[1:], strict=False))
    points = (len(relatives) - 2) + (closest < close_gap)
    return ("easy", "medium", "hard")[min(points, 2)]


def _dedupe(reviews: list[Review]) -> dict[str, dict[str, Review]]:
    """user -> item -> the user's first review of it."""
    by_user: dict[str, dict[str, Review]] = {}
    for review in sorted(reviews, key=lambda r: (r.timestamp, r.user, r.item)):
        by_user.setdefault(review.user, {}).setdefault(review.item, review)
    return by_user


def find_groups(reviews: list[Review], settings: GroupSettings) -> list[Group]:
    """Groups of co-rating users (see module docstring), without prompts; deterministic."""
    by_user = _dedupe(reviews)
    means = {u: sum(r.rating for r in items.values()) / len(items) for u, items in by_user.items()}
    by_item: dict[str, list[Member]] = {}
    for user, items in by_user.items():
        if len(items) - 1 < settings.min_history:
            continue
        for review in items.values():
            member = Member(user, review.rating, review.rating - means[user], review.timestamp)
            by_item.setdefault(review.item, []).append(member)
    window = settings.window_days * 86400
    groups: list[Group] = []
    for item in sorted(by_item):
        candidates = sorted(by_item[item], key=lambda m: (m.timestamp, m.user))
        used: set[str] = set()
        for first in candidates:
            if first.user in used:
                continue
            chosen = [first]
            for other in candidates:
                if len(chosen) == settings.max_size:
                    break
                if (
                    other.user not in used
                    and other is not first
                    and first.timestamp <= other.timestamp <= first.timestamp + window
                    and all(abs(other.relative - m.relative) > settings.min_gap for m in chosen)
                ):
                    chosen.append(other)
            used.add(first.user)  # a rating that cannot open a group is in no later window either
            if len(chosen) >= 2:
                used.update(m.user for m in chosen)
                groups.append(Group(f"{item}#{len(groups)}", item, chosen))
    for group in groups:
        group.difficulty = difficulty([m.relative for m in group.members], settings.close_gap)
    return groups


def _profile(others: list[Review], items: dict[str, ItemInfo]) -> str:
    """A template summary of a user's other ratings: volume, mean, top categories, likes, dislikes."""
    mean = sum(r.rating for r in others) / len(others)
    categories = Counter(c for r in others for c in (items[r.item].categories if r.item in items else []))
    ranked = sorted(others, key=lambda r: (-r.rating, -r.timestamp))
    liked = "; ".join(item_title(items, r.item) for r in ranked[:2])
    disliked = "; ".join(item_title(items, r.item) for r in ranked[::-1][:2])
    parts = [f"Rated {len(others)} items, {mean:.1f}/5 on average."]
    if categories:
        parts.append(f"Most rated categories: {', '.join(c for c, _ in categories.most_common(3))}.")
    parts.append(f"Rated highest: {liked}. Rated lowest: {disliked}.")
    return " ".join(parts)


def attach_prompts(groups: list[Group], reviews: list[Review], items: dict[str, ItemInfo], settings: GroupSettings):
    """Fill each group's user blocks (history by BM25, profile, shown mean), labels in a seeded order."""
    by_user = _dedupe(reviews)
    corpus = {i: _tokens(_item_text(items.get(i), i)) for u in by_user.values() for i in u}
    bm25 = BM25(corpus)
    for group in groups:
        query = corpus[group.item]
        members = list(group.members)
        random.Random(group.id).shuffle(members)  # so the best-liked user is not always A
        group.users = []
        for label, member in zip(LABELS, members, strict=False):
            others = [r for i, r in by_user[member.user].items() if i != group.item]
            ranked = sorted(others, key=lambda r: (-bm25.score(query, r.item), -r.timestamp))[: settings.k]
            group.users.append(
                {
                    "label": label,
                    "user": member.user,
                    "mean_rating": round(sum(r.rating for r in others) / len(others), 3),
                    "history": [{"title": item_title(items, r.item), "rating": r.rating} for r in ranked],
                    "profile": _profile(others, items) if settings.profile else None,
                    "rating": member.rating,
                    "relative_rating": round(member.relative, 4),
                }
            )


def _rating_text(rating: float) -> str:
    return str(int(rating)) if float(rating).is_integer() else f"{rating:.1f}"


def _relabel(users: list[dict]) -> list[dict]:
    return [{**u, "label": label} for label, u in zip(LABELS, users, strict=False)]


def group_rows(group: Group, items: dict[str, ItemInfo], domain: str) -> list[PerRecRow]:
    """The group's pointwise, pairwise and listwise rows."""
    info = items.get(group.item) or ItemInfo(group.item, item_title(items, group.item))
    item = {"id": info.id, "title": info.title, "categories": info.categories, "description": info.description}

    def row(task: str, suffix: str, users: list[dict], answer: str) -> PerRecRow:
        row_id = f"{group.id}/{task}" + (f"/{suffix}" if suffix else "")
        return PerRecRow(row_id, "perrecbench", domain, task, group.id, len(group.users), group.difficulty, item,
                         users, answer)  # fmt: skip

    rows = [row("pointwise", str(i), _relabel([u]), _rating_text(u["rating"])) for i, u in enumerate(group.users)]
    for a, b in combinations(group.users, 2):
        pair = _relabel([a, b])
        winner = max(pair, key=lambda u: u["relative_rating"])["label"]
        rows.append(row("pairwise", f"{a['label']}{b['label']}", pair, winner))
    ranking = sorted(group.users, key=lambda u: -u["relative_rating"])
    rows.append(row("listwise", "", group.users, " > ".join(u["label"] for u in ranking)))
    return rows


def _user_block(user: dict) -> str:
    lines = [f"User {user['label']}:"]
    if user.get("profile"):
        lines.append(f"Profile: {user['profile']}")
    lines.append(f"Average rating of other items: {user['mean_rating']:.2f}")
    if user["history"]:
        lines.append("Ratings of related items:")
        lines += [f"- {h['title']}: {_rating_text(h['rating'])}" for h in user["history"]]
    return "\n".join(lines)


def build_messages(row: PerRecRow) -> list[dict]:
    item = row.item
    lines = [f"Item: {item['title']}"]
    if item.get("categories"):
        lines.append(f"Categories: {', '.join(item['categories'])}")
    if item.get("description"):
        lines.append(f"Description: {item['description'][:300]}")
    text = "\n".join(lines) + "\n\n" + "\n\n".join(_user_block(u) for u in row.users)
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{text}\n\n{INSTRUCTIONS[row.task]}"},
    ]


# Parsing completions -------------------------------------------------------------------------

_RATING = re.compile(r"(?<![\d.])([1-5](?:\.\d+)?)(?![\d.])")
_CHOICE = re.compile(r"\b(?:[Uu]ser\s+)?([AB])\b")
_LETTER = re.compile(r"\b([A-H])\b")


def parse_rating(text: str) -> float | None:
    match = _RATING.search(text)
    return float(match.group(1)) if match else None


def parse_choice(text: str) -> str | None:
    match = _CHOICE.search(text)
    return match.group(1) if match else None


def parse_ranking(text: str, labels: list[str]) -> list[str] | None:
    """The labels in the order written; None unless every label appears."""
    order = list(dict.fromkeys(m for m in _LETTER.findall(text) if m in labels))
    return order if len(order) == len(labels) else None


def tau(truth: list[float], predicted: list[float]) -> float:
    """Kendall's τ-b; a constant prediction (no order at all) scores 0."""
    value = kendalltau(truth, predicted).statistic
    return 0.0 if value is None or math.isnan(value) else float(value)


# Scoring --------------------------------------------------------------------------------------


@dataclass
class GroupScore:
    group: str
    task: str
    difficulty: str
    group_size: int
    tau: float
    failed: bool


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
            scores.update({u["user"]: -position[u["label"]] for u in row.users})
    return scores


def score_groups(rows: list[PerRecRow], predictions: dict[str, str]) -> list[GroupScore]:
    by_group: dict[tuple[str, str], list[PerRecRow]] = {}
    for row in rows:
        by_group.setdefault((row.task, row.group), []).append(row)
    scores = []
    for (task, group), members in by_group.items():
        truth = {u["user"]: u["relative_rating"] for row in members for u in row.users}
        if len(truth) < 2:
            continue  # a group cut by --limit to one user has no order to score
        predicted = _predicted_scores(task, members, [predictions[r.id] for r in members])
        value = 0.0 if predicted is None else tau([truth[u] for u in truth], [predicted[u] for u in truth])
        first = members[0]
        scores.append(GroupScore(group, task, first.difficulty, len(truth), value, predicted is None))
    return scores


def summarize(scores: list[GroupScore]) -> dict:
    parsed = [s.tau for s in scores if not s.failed]
    n = len(scores)
    return {
        "n": n,
        "tau": sum(s.tau for s in scores) / n if n else None,
        "tau_parsed": sum(parsed) / len(parsed) if parsed else None,
        "failure_rate": (n - len(parsed)) / n if n else None,
    }


METRICS = ("tau", "tau_parsed", "failure_rate")


def aggregate(scores: list[GroupScore]) -> dict:
    """``overall``, ``by_task`` (format) and ``by_task_difficulty`` / ``by_task_size`` summaries over groups."""
    report: dict = {"metrics": list(METRICS), "overall": summarize(scores), "by_task": {}}
    report["by_task_difficulty"], report["by_task_size"] = {}, {}
    for task in PERREC_TASKS:
        task_scores = [s for s in scores if s.task == task]
        if not task_scores:
            continue
        report["by_task"][task] = summarize(task_scores)
        report["by_task_difficulty"][task] = {
            d: summarize([s for s in task_scores if s.difficulty == d])
            for d in ("easy", "medium", "hard")
            if any(s.difficulty == d for s in task_scores)
        }
        sizes = sorted({s.group_size for s in task_scores})
        report["by_task_size"][task] = {str(n): summarize([s for s in task_scores if s.group_size == n]) for n in sizes}
    return report


def format_table(report: dict) -> str:
    lines = ["| format | difficulty | groups | τ | τ (parsed) | failures |", "|---|---|---|---|---|---|"]

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
            "group_tau": by_group[(row.task, row.group)].tau,
            "group_failed": by_group[(row.task, row.group)].failed,
        }
        for row in rows
    ]


# Training examples and rewards ---------------------------------------------------------------


def sft_example(row: PerRecRow) -> dict:
    return {"messages": [*build_messages(row), {"role": "assistant", "content": row.answer}]}


def rft_example(row: PerRecRow, group_relative: list[float], position: int) -> dict:
    """Prompt plus the labels the rewards read; ``position`` = the pointwise user's index in the group."""
    return {
        "prompt": build_messages(row),
        "id": row.id,
        "benchmark": "perrecbench",
        "task": row.task,
        "labels": [u["label"] for u in row.users],
        "relative": [u["relative_rating"] for u in row.users],
        "means": [u["mean_rating"] for u in row.users],
        "group_relative": group_relative,
        "position": position,
    }


def rft_examples(rows: list[PerRecRow]) -> list[dict]:
    listwise = {r.group: r for r in rows if r.task == "listwise"}
    examples = []
    for row in rows:
        group_users = listwise[row.group].users
        group_relative = [u["relative_rating"] for u in group_users]
        position = [u["user"] for u in group_users].index(row.users[0]["user"]) if row.task == "pointwise" else -1
        examples.append(rft_example(row, group_relative, position))
    return examples


def ranking_reward(task: str, text: str, labels: list[str], relative: list[float], means: list[float],
                   group_relative: list[float], position: int) -> float:  # fmt: skip
    """The evaluation's τ for one completion; an unparseable answer scores -1 (as bad as a reversed order).

    Pointwise: τ of the group's true relative ratings against the same ratings with this user's
    replaced by the prediction − their mean, i.e. how much the prediction disturbs the true order.
    """
    if task == "pointwise":
        rating = parse_rating(text)
        if rating is None:
            return -1.0
        predicted = list(group_relative)
        predicted[position] = rating - means[0]
        return tau(group_relative, predicted)
    if task == "pairwise":
        choice = parse_choice(text)
        if choice is None:
            return -1.0
        best = labels[max(range(len(labels)), key=lambda i: relative[i])]
        return 1.0 if choice == best else -1.0
    order = parse_ranking(text, labels)
    if order is None:
        return -1.0
    return tau(relative, [-order.index(label) for label in labels])


def format_reward(task: str, text: str, labels: list[str]) -> float:
    parsed = {"pointwise": parse_rating, "pairwise": parse_choice}.get(task)
    return float((parsed(text) if parsed else parse_ranking(text, labels)) is not None)


REWARDS: dict[str, Callable[..., float]] = {"ranking": ranking_reward, "format": format_reward}
RANKING_COLUMNS = ("labels", "relative", "means", "group_relative", "position")
DEFAULT_REWARDS = ["ranking", "format"]


# Building the benchmark ------------------------------------------------------------------------


def split_by_item(groups: list[Group], test_size: float, seed: int) -> tuple[list[Group], list[Group]]:
    """Every group of an item lands in the same split (no item is in both); deterministic for a seed."""
    if not 0.0 <= test_size <= 1.0:
        raise ValueError(f"--test-size must be in [0, 1], got {test_size}")
    item_ids = sorted({g.item for g in groups})
    random.Random(seed).shuffle(item_ids)
    test_items = set(item_ids[: round(test_size * len(item_ids))])
    return [g for g in groups if g.item not in test_items], [g for g in groups if g.item in test_items]


def stats(train: list[Group], test: list[Group], reviews: list[Review], settings: GroupSettings) -> dict:
    def counts(groups: list[Group]) -> dict:
        return {
            "groups": len(groups),
            "items": len({g.item for g in groups}),
            "by_size": dict(sorted(Counter(str(len(g.members)) for g in groups).items())),
            "by_difficulty": {d: sum(g.difficulty == d for g in groups) for d in ("easy", "medium", "hard")},
        }

    return {
        "reviews": len(reviews),
        "users": len({r.user for r in reviews}),
        "settings": vars(settings),
        "train": counts(train),
        "test": counts(test),
    }
