"""The template profile of a user's earlier ratings, kept up to date one rating at a time.

A profile states volume and mean (worded for one rating and for equal ratings), the most rated
categories and the highest and lowest rated items, never one item as both. :class:`Profile` adds
ratings one by one and can state the profile after any of them, so a user in many groups (a heavy
MovieLens user is in hundreds) has the profiles of all their histories' prefixes in one pass over
their ratings instead of one pass per group. The text equals what sorting the whole list gives:
likes are the top two by (rating, most recent), dislikes the bottom two by (rating, oldest), ties in
the order the ratings were added.
"""

from __future__ import annotations

from collections import Counter

from rectune.data.ratings import Review, item_title, rating_text
from rectune.data.titles import CatalogItem

NO_EARLIER = "No earlier ratings."  # the profile of a user who rated nothing (shown) before the shared item


class Profile:
    def __init__(self, items: dict[str, CatalogItem], scale: list[float] | None):
        self.items, self.top = items, (scale[1] if scale else 5)
        self.count, self.total = 0, 0
        self.categories: Counter[str] = Counter()
        self.ratings: set[float] = set()
        self.first: Review | None = None
        # the two best and the two worst so far, as (sort key, review). The worst order is the best order
        # reversed, so a like is among the two worst only with three ratings or fewer, and then the third
        # is the best, which is a like or rated highest: the two worst always hold the dislikes
        self.best: list[tuple[tuple, Review]] = []
        self.worst: list[tuple[tuple, Review]] = []

    def add(self, review: Review) -> None:
        position = self.count
        self.count += 1
        self.total += review.rating  # left to right, as sum() over the list would
        self.first = self.first or review
        info = self.items.get(review.item)
        self.categories.update(info.categories if info else ())
        self.ratings.add(review.rating)
        self.best = sorted([*self.best, ((-review.rating, -review.timestamp, position), review)])[:2]
        self.worst = sorted([*self.worst, ((review.rating, review.timestamp, -position), review)])[:2]

    def text(self) -> str:
        if not self.count:
            return NO_EARLIER
        if self.count == 1:
            only = self.first
            parts = [f"Rated 1 item: {item_title(self.items, only.item)}, {rating_text(only.rating)}/{self.top:g}."]
        elif len(self.ratings) == 1:
            parts = [f"Rated {self.count} items, all {rating_text(self.first.rating)}/{self.top:g}."]
        else:
            parts = [f"Rated {self.count} items, {self.total / self.count:.1f}/{self.top:g} on average."]
        if self.categories:
            parts.append(f"Most rated categories: {', '.join(c for c, _ in self.categories.most_common(3))}.")
        if len(self.ratings) > 1:
            low, high = min(self.ratings), max(self.ratings)
            liked = [r for _, r in self.best if r.rating > low]
            disliked = [r for _, r in self.worst if r.rating < high and all(r is not x for x in liked)][:2]
            parts.append(f"Rated highest: {'; '.join(item_title(self.items, r.item) for r in liked)}.")
            parts.append(f"Rated lowest: {'; '.join(item_title(self.items, r.item) for r in disliked)}.")
        return " ".join(parts)


def profile_text(reviews: list[Review], items: dict[str, CatalogItem], scale: list[float] | None) -> str:
    """The profile of ``reviews`` (in the order given)."""
    profile = Profile(items, scale)
    for review in reviews:
        profile.add(review)
    return profile.text()
