"""Profile-based RecBench+ queries built from an interaction log (seed 001, §2.3).

* **Interest-based** queries come from item pairs that many users consumed one right after the
  other; the ground truth is what those users consumed next.
* **Demographics-based** queries come from each demographic group's distinctive popular items
  (tf-idf of the group's item counts against the other groups of the same kind).

Titles are written as a person writes them (``The English Patient (1996)``), as in the release's
query files.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict

from rectune.benchmarks.recbench.query_text import DEMOGRAPHIC_TEMPLATES, INTEREST_TEMPLATES, group_label, group_of
from rectune.data.item_ids import release_id


def interest_queries(
    names: dict[str, str],
    histories: dict[str, list[str]],
    rng: random.Random,
    min_users: int,
    times: dict[str, list[int]] | None = None,
    allow_tied_pairs: bool = False,
) -> list[dict]:
    """Queries from item pairs at least ``min_users`` users consumed back to back (``names``: id -> title).

    With ``times`` (each history's timestamps), a pair or its follow-up counts only when strictly later
    (unless ``allow_tied_pairs``): the order of events in the same second is the tie rule's, not the user's."""
    followers: dict[tuple[str, str], list[str]] = defaultdict(list)
    next_items: dict[tuple[str, str], Counter] = defaultdict(Counter)
    strict = times is not None and not allow_tied_pairs
    for user, items in sorted(histories.items()):
        stamps = times[user] if strict else [0] * len(items)
        for index, (a, b) in enumerate(zip(items[:-1], items[1:], strict=False)):
            if strict and stamps[index] == stamps[index + 1]:
                continue
            followers[(a, b)].append(user)
            after = items[index + 2] if index + 2 < len(items) else None
            if after is not None and after not in (a, b) and not (strict and stamps[index + 2] == stamps[index + 1]):
                next_items[(a, b)][after] += 1
    records = []
    for pair, users in sorted(followers.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        users = sorted(set(users))
        following = [i for i, _ in next_items[pair].most_common(5)]
        if len(users) < min_users or not following:
            continue
        a, b = (names[i] for i in pair)
        records.append(
            {
                "Shared consecutive movies": [a, b],
                "source_users": users,
                "query & ground true": [
                    {
                        "reason": f"{len(users)} users watched these two back to back",
                        "query": rng.choice(INTEREST_TEMPLATES).format(a=a, b=b),
                        "movie subset": [names[i] for i in following],
                    }
                ],
            }
        )
    return records


def demographics_queries(
    names: dict[str, str],
    histories: dict[str, list[str]],
    users: dict[str, dict],
    rng: random.Random,
    min_group_users: int,
    top_items: int,
) -> list[dict]:
    """One query per demographic group of at least ``min_group_users`` users: its ``top_items`` most
    distinctive items."""
    records = []
    for group_type in ("gender", "age", "occupation", "gender_age"):
        groups: dict[str, list[str]] = defaultdict(list)
        for user, profile in users.items():
            if user in histories:
                groups[group_of(profile, group_type)].append(user)
        groups = {g: m for g, m in groups.items() if len(m) >= min_group_users}
        if len(groups) < 2:
            continue
        counts = {g: Counter(i for u in m for i in set(histories[u])) for g, m in groups.items()}
        spread = Counter(i for c in counts.values() for i in c)
        for group, members in sorted(groups.items()):
            scores = {i: (n / len(members)) * math.log(len(groups) / spread[i] + 1) for i, n in counts[group].items()}
            top = sorted(scores, key=lambda i: (-scores[i], i))[:top_items]
            label = group_label(group, group_type)
            records.append(
                {
                    "group_type": group_type,
                    "group": group,
                    "top_10_movies": [[release_id(i), round(scores[i], 4)] for i in top],
                    "summary": f"{label} ({len(members)} users) distinctively watch "
                    + ", ".join(names[i] for i in top[:3])
                    + ".",
                    "query & ground true": [
                        {
                            "reason": f"distinctive popular movies of {label}",
                            "query": rng.choice(DEMOGRAPHIC_TEMPLATES).format(who=label.lower()),
                            "movie subset": [names[i] for i in top],
                        }
                    ],
                }
            )
    return records
