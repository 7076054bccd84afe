"""LLMRec data (seed 003) from Amazon-style reviews: the 5-core, leave-one-out, the five tasks' rows.

A user's first review of an item counts once; users and items are filtered to the
``min_interactions``-core (5 by default: repeated until every user and item has at least 5);
each user's reviews are ordered by time (equal timestamps by numeric item id, see
:func:`rectune.data.movielens.chronological`) and split leave-one-out: the last one is the test
target, the one before it the training target, each with the reviews before it as history
(the last ``history`` of them in the prompt).

Ratings-only sources (MovieLens: no review text) give the rating, sequential and direct tasks,
with rows marked ``feedback: ratings``; rows carry the source's rating scale when it is not 1-5.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from tqdm import tqdm

from rectune.benchmarks.llmrec.rows import NAME, LLMRecRow
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import Review, item_title
from rectune.data.sampling import sample_users
from rectune.data.titles import CatalogItem


@dataclass
class BuildSettings:
    min_interactions: int = 5
    history: int = 10
    num_candidates: int = 20
    sequential_candidates: bool = False
    max_review_words: int = 64
    scale: list[float] | None = None  # set from the data by build_rows (None: 1-5)
    feedback: str | None = None  # "ratings" when the source has no review text


def _words(text: str, limit: int) -> str:
    return " ".join(text.split()[:limit])


def _entry(review: Review, items: dict[str, CatalogItem]) -> dict:
    return {"id": review.item, "title": item_title(items, review.item), "rating": review.rating}


class Unreviewed(Sequence):
    """The sorted items a user never reviewed, without listing them: the ``j``-th is found by bisecting the
    positions of the reviewed ones. ``random.sample`` draws from it exactly as from the list, at the cost of
    the draws instead of a pass over every item per user (ML-25M: 62,000 items, 162,000 users)."""

    def __init__(self, all_items: list[str], positions: dict[str, int], reviewed: set[str]):
        self.all_items = all_items
        self.skipped = sorted(positions[i] for i in reviewed if i in positions)

    def __len__(self) -> int:
        return len(self.all_items) - len(self.skipped)

    def __getitem__(self, index: int) -> str:
        if not 0 <= index < len(self):
            raise IndexError(index)
        # the answer is the position p with p - (reviewed positions <= p) == index and p not reviewed
        low, high = index, index + len(self.skipped)
        while low < high:
            middle = (low + high) // 2
            if middle - bisect_right(self.skipped, middle) < index:
                low = middle + 1
            else:
                high = middle
        return self.all_items[low]


def user_rows(
    user: str,
    events: list[Review],
    items: dict[str, CatalogItem],
    domain: str,
    settings: BuildSettings,
    rng: random.Random,
    pool: Unreviewed,
) -> list[LLMRecRow]:
    """The five tasks for the review ``events[-1]`` with the reviews before it as history.

    Negative candidates come from ``pool``: items the user never reviewed (later reviews included)."""
    target = events[-1]
    history = [_entry(r, items) for r in events[:-1][-settings.history :]]
    item = {"id": target.item, "title": item_title(items, target.item)}

    def candidates() -> list[dict]:
        chosen = rng.sample(pool, min(settings.num_candidates - 1, len(pool))) + [target.item]
        rng.shuffle(chosen)
        return [{"id": i, "title": item_title(items, i)} for i in chosen]

    def row(task: str, answer: str, **extra) -> LLMRecRow:
        return LLMRecRow(f"{task}/{user}", NAME, domain, task, user, history, item, answer, **extra,
                         scale=settings.scale, feedback=settings.feedback)  # fmt: skip

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
    store: RatingStore,
    items: dict[str, CatalogItem],
    domain: str,
    settings: BuildSettings,
    seed: int,
    max_users: int | None = None,
) -> tuple[list[LLMRecRow], list[LLMRecRow], dict, dict | None]:
    """Training rows (second-to-last review), test rows (last review), the k-core's facts (its reviews, users,
    items and ``item_ids``) and, with ``max_users``, the record of the users' sample (stratified by activity:
    k-core reviews per user). Only the sampled users' reviews are read out of the store.

    ``settings.scale`` and ``settings.feedback`` are set from the reviews; candidates are drawn from
    every k-core item, sampled or not."""
    settings.scale = store.scale().for_rows()
    settings.feedback = None if store.has_text() else "ratings"
    counts = store.k_core(settings.min_interactions)
    users, sampling = sample_users(sorted(counts), counts, max_users, seed)
    all_items = store.core_items()
    core = {"reviews": sum(counts.values()), "users": len(counts), "items": len(all_items), "item_ids": all_items}
    by_user = store.first_ratings(users, in_core=True)
    positions = {item: index for index, item in enumerate(all_items)}
    rng = random.Random(seed)
    train, test = [], []
    for user in tqdm(users, desc="rows", unit="user", disable=None):
        events = by_user.pop(user)
        pool = Unreviewed(all_items, positions, {r.item for r in events})
        train += user_rows(user, events[:-1], items, domain, settings, rng, pool)
        test += user_rows(user, events, items, domain, settings, rng, pool)
    return train, test, core, sampling


def catalog(item_ids: list[str], items: dict[str, CatalogItem]) -> list[CatalogItem]:
    """The reviewed items in the source's spelling (answers are matched against it), ``name`` and
    ``merged_ids`` kept; items without metadata go by ``item ID``."""
    kept = ("name", "merged_ids")
    return [
        CatalogItem(i, items[i].title, {k: v for k, v in items[i].attributes.items() if k in kept})
        if i in items else CatalogItem(i, item_title(items, i))
        for i in item_ids
    ]  # fmt: skip
