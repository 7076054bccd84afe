"""A synthetic Amazon Reviews 2023 category in the release's JSONL layout, at millions of reviews.

Reviews (``user_id``, ``parent_asin``, ``asin``, ``rating`` whole stars, ``timestamp`` in ms, ``title``,
``text``, ``helpful_vote``, ``verified_purchase``, ``images``) and metadata (``parent_asin``, ``title``,
``main_category``, ``categories``, ``description``, ``features``, ``average_rating``, ``rating_number``,
``store``, ``details``), as the 2023 release writes them. The shape is a category's: most users write one
or two reviews and a few write hundreds (a heavy tail), a few items hold most reviews, ratings lean to
five stars, and a user's reviews come in bursts (several the same day, then days apart).
"""

from __future__ import annotations

import json
from pathlib import Path

WORDS = ("great", "story", "read", "characters", "plot", "slow", "loved", "author", "ending", "series", "gift",
         "pages", "boring", "recommend", "beautiful", "writing", "again", "quick", "long", "favourite")  # fmt: skip
CATEGORIES = ("Literature & Fiction", "Mystery, Thriller & Suspense", "Science Fiction & Fantasy", "Romance",
              "History", "Biographies & Memoirs", "Children's Books", "Cookbooks", "Self-Help", "Poetry")  # fmt: skip


def write_amazon_2023(folder: Path, n_users: int, n_items: int, n_reviews: int, seed: int = 0) -> Path:
    """``reviews.jsonl`` and ``meta.jsonl`` of about ``n_reviews`` reviews in ``folder``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    counts = np.maximum(1, rng.pareto(1.3, n_users) + 1).astype(np.int64)  # most write one, a few hundreds
    counts = np.minimum(np.maximum(1, counts * n_reviews // counts.sum()), 2000)  # top reviewers write thousands
    with open(folder / "meta.jsonl", "w", encoding="utf-8") as handle:
        for index in range(n_items):
            category = CATEGORIES[index % len(CATEGORIES)]
            words = rng.choice(len(WORDS), 3)
            handle.write(json.dumps({
                "main_category": "Books", "title": f"The {WORDS[words[0]].title()} {WORDS[words[1]].title()} {index}",
                "average_rating": 4.4, "rating_number": 0, "features": [],
                "description": [f"A {WORDS[words[2]]} book about {category.lower()}."], "price": None, "images": [],
                "videos": [], "store": f"Author {index % 997}", "categories": ["Books", category], "details": {},
                "parent_asin": f"B{index:09d}", "bought_together": None,
            }) + "\n")  # fmt: skip
    with open(folder / "reviews.jsonl", "w", encoding="utf-8") as handle:
        for first in range(0, n_users, 20_000):
            block = counts[first : first + 20_000]
            users = np.repeat(np.arange(first, first + len(block)), block)
            items = (n_items * rng.random(len(users)) ** 3).astype(np.int64)  # a few items hold most reviews
            stars = rng.choice([1, 2, 3, 4, 5], len(users), p=[0.07, 0.05, 0.08, 0.17, 0.63])
            same_day = rng.random(len(users)) < 0.6
            gaps = np.where(same_day, rng.integers(60, 3600, len(users)), rng.integers(1, 8, len(users)) * 86400)
            start = 1_300_000_000 + (users * 104_729) % (8 * 365 * 86400)
            offsets = np.cumsum(gaps)
            starts = np.searchsorted(users, users)
            times = (start + offsets - offsets[starts] + gaps[starts]) * 1000
            votes = rng.poisson(0.8, len(users))
            texts = rng.choice(len(WORDS), (len(users), 12))
            rows = zip(users.tolist(), items.tolist(), stars.tolist(), times.tolist(), votes.tolist(), texts.tolist(),
                       strict=True)  # fmt: skip
            for user, item, star, ts, vote, text in rows:
                words = [WORDS[w] for w in text]
                handle.write(json.dumps({
                    "rating": float(star), "title": " ".join(words[:3]).capitalize(),
                    "text": " ".join(words).capitalize() + ".", "images": [], "asin": f"B{item:09d}",
                    "parent_asin": f"B{item:09d}", "user_id": f"AE{user:026X}", "timestamp": ts,
                    "helpful_vote": vote, "verified_purchase": bool(vote % 2),
                }) + "\n")  # fmt: skip
    return folder
