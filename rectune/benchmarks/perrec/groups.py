"""PerRecBench construction: groups of users who rated the same item, their prompt blocks, the split.

Construction (:func:`find_groups`, :func:`attach_prompts`), following the paper (seed 002):

* relative rating = the user's rating of the item − the user's mean rating (all their ratings);
* eligible users have at least ``min_history`` (20) other rated items;
* a group is a set of eligible users who rated the same item within ``window_days`` (7) of
  the group's first rating, whose relative ratings differ pairwise by more than ``min_gap``
  (0.6, compared with a 1e-9 tolerance so that 4.6 - 4.0 is not "more than 0.6"), of 2 to
  ``max_size`` (4) users. Per item, ratings are taken in time order: the first
  unused rating opens a window, the users in it join greedily in time order while they keep
  every pairwise gap above ``min_gap``, and the window's users that joined are used up;
* each user's history in the prompt is the top-``k`` (4) of the items they rated *before* the
  shared item (``past_only``; otherwise any other item) by BM25 against the shared item's title
  and categories (IDF over all items), most recent first on ties. Retrieval text leaves the
  title's year out: a year token is rare, so it would outscore every shared genre. The profile
  summarises the same earlier ratings in plain words at any count (one rating, equal ratings); a
  user with none shows the profile ``No earlier ratings.`` (counted in ``stats.json`` as
  ``members_without_earlier_ratings``); the shown mean is over all the user's other ratings, the
  mean the relative rating is defined by;
* difficulty: one point per user beyond two, plus one when the closest two relative ratings
  are less than ``close_gap`` (1.0) apart; 0 points = ``easy``, 1 = ``medium``, 2+ = ``hard``.
  Group size is what the paper found drives difficulty (τ 0.20 → 0.06 at 4+ users); the
  closest gap adds the near-ties that make a single comparison hard.

Each group is stored once (:func:`group_record`); its formats are derived on load: ``pointwise``
(one row per user: predict the rating; users are ranked by prediction − their mean), ``pairwise``
(one row per pair: which of A and B liked it more; a group's users are ranked by pairs won),
``listwise`` (one row: rank all users, ``"B > A > C"``).
Scoring: Kendall's τ-b (scipy) between the true relative ratings and the predicted order, per
group; a group with an unparseable answer is a failure: it counts τ = 0 in ``tau`` and is
left out of ``tau_parsed``; ``failure_rate`` reports the share.
"""

from __future__ import annotations

import heapq
import math
import random
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from tqdm import tqdm

from rectune.benchmarks.perrec.profiles import NO_EARLIER, Profile, profile_text
from rectune.benchmarks.perrec.rows import DIFFICULTIES, LABELS, NAME, PerRecGroup
from rectune.core.io import RecTuneError
from rectune.data.rating_store import RatingStore
from rectune.data.ratings import Review, item_title
from rectune.data.sampling import stratified_choice
from rectune.data.titles import CatalogItem, split_title


@dataclass
class GroupSettings:
    window_days: float = 7.0
    min_history: int = 20
    min_gap: float = 0.6
    max_size: int = 4
    close_gap: float = 1.0
    k: int = 4
    profile: bool = True
    past_only: bool = True


GAP_TOLERANCE = 1e-9  # ratings are decimals: 4.6 - 4.0 = 0.5999999999999996 must not pass or fail by rounding


@dataclass(slots=True)
class Member:
    user: str
    rating: float
    relative: float
    timestamp: int


@dataclass(slots=True)
class Group:
    id: str
    item: str
    members: list[Member]
    difficulty: str = ""
    users: list[dict] = field(default_factory=list)  # prompt blocks, in label order


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.casefold())


def _item_text(info: CatalogItem | None, item_id: str) -> str:
    if info is None:
        return item_id
    main, alternates, _year = split_title(info.title)
    return " ".join([main, *alternates, *info.categories])


class BM25:
    """Okapi BM25 (k1 1.5, b 0.75) with document frequencies over the whole item collection.

    Each document's term weights are computed once and a query adds them up through an inverted index:
    prompts rank every group member's history against the shared item.
    """

    def __init__(self, documents: dict[str, list[str]], k1: float = 1.5, b: float = 0.75):
        avg_length = sum(map(len, documents.values())) / max(len(documents), 1)
        df = Counter(token for tokens in documents.values() for token in set(tokens))
        n = len(documents)
        idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}
        self.weights: dict[str, dict[str, float]] = {}
        for doc_id, tokens in documents.items():
            norm = k1 * (1 - b + b * len(tokens) / (avg_length or 1))
            self.weights[doc_id] = {t: idf[t] * c * (k1 + 1) / (c + norm) for t, c in Counter(tokens).items()}
        self.postings: dict[str, list[str]] = {}
        for doc_id, weights in self.weights.items():
            for term in weights:
                self.postings.setdefault(term, []).append(doc_id)

    def score(self, doc_id: str, terms: list[str]) -> float:
        """One document's score against distinct query ``terms``: the sum :meth:`scores` makes, in its order."""
        weights, total = self.weights.get(doc_id, {}), 0.0
        for term in terms:
            weight = weights.get(term)
            if weight is not None:
                total += weight
        return total

    def postings_cost(self, terms: list[str]) -> int:
        """How many documents :meth:`scores` visits for ``terms``."""
        return sum(len(self.postings.get(term, ())) for term in terms)

    def scores(self, query: list[str]) -> dict[str, float]:
        """The score against ``query`` of every document sharing a term with it (the rest score 0)."""
        totals: dict[str, float] = {}
        # terms in the query's order, not a set's: a set's order follows the per-process string hash, and the
        # order of a float sum decides exact ties between equally relevant items (and so which one is shown)
        for term in dict.fromkeys(query):
            for doc_id in self.postings.get(term, ()):
                totals[doc_id] = totals.get(doc_id, 0.0) + self.weights[doc_id][term]
        return totals


def difficulty(relatives: list[float], close_gap: float) -> str:
    ordered = sorted(relatives)
    closest = min(b - a for a, b in zip(ordered, ordered[1:], strict=False))
    points = (len(relatives) - 2) + (closest < close_gap)
    return DIFFICULTIES[min(points, len(DIFFICULTIES) - 1)]


def find_groups(store: RatingStore, settings: GroupSettings) -> Iterator[Group]:
    """Groups of co-rating users (see module docstring), without prompts, one at a time; deterministic."""
    by_item = store.by_item(settings.min_history)  # item by item: one item's ratings in memory at a time
    window = settings.window_days * 86400
    found = 0
    for item, ratings in tqdm(by_item, desc="grouping", unit=" items", disable=None):
        candidates = [Member(*rating) for rating in ratings]  # by time, then user
        used: set[str] = set()
        for start, first in enumerate(candidates):
            if first.user in used:
                continue
            chosen = [first]
            # every earlier candidate opened a window already (and is used): only later ones can join
            for other in candidates[start + 1 :]:
                if len(chosen) == settings.max_size or other.timestamp > first.timestamp + window:
                    break
                if other.user not in used and all(
                    abs(other.relative - m.relative) > settings.min_gap + GAP_TOLERANCE for m in chosen
                ):
                    chosen.append(other)
            used.add(first.user)  # a rating that cannot open a group is in no later window either
            if len(chosen) >= 2:
                used.update(m.user for m in chosen)
                level = difficulty([m.relative for m in chosen], settings.close_gap)
                yield Group(f"{item}#{found}", item, chosen, level)
                found += 1


def attach_prompts(
    groups: list[Group],
    store: RatingStore,
    items: dict[str, CatalogItem],
    settings: GroupSettings,
    hidden: set[str] | frozenset[str] = frozenset(),
    scale: list[float] | None = None,
) -> None:
    """Fill each group's user blocks (history by BM25, profile, shown mean), labels in a seeded order.

    ``hidden`` items never appear in these blocks: the training split's prompts must not show a user's
    rating of a held-out item, which is what the test asks for. With ``settings.past_only`` the history
    and profile come from the items the user rated before the shared item only.
    """
    corpus = {i: _tokens(_item_text(items.get(i), i)) for i in store.rated_items()}
    bm25 = BM25(corpus)
    by_user = store.first_ratings(m.user for g in groups for m in g.members)  # these groups' users only
    visible: dict[str, tuple[list[Review], list[int], float]] = {}  # user -> chronological, times, rating sum
    profiles: dict[str, list[tuple[int, dict]]] = {}  # user -> (earlier ratings shown, block) awaiting a profile
    scored_item, scores, terms, cost = None, None, [], 0
    for group in tqdm(groups, desc="prompts", unit="group", disable=None):
        if group.item != scored_item:  # groups come item by item: the item's neighbours are scored once at most
            scored_item, scores = group.item, None
            terms = list(dict.fromkeys(corpus[group.item]))
            cost = bm25.postings_cost(terms)
        members = list(group.members)
        random.Random(group.id).shuffle(members)  # so the best-liked user is not always A
        group.users = []
        for label, member in zip(LABELS, members, strict=False):
            if member.user not in visible:
                seen = [r for r in by_user.pop(member.user) if r.item not in hidden]
                visible[member.user] = (seen, [r.timestamp for r in seen], sum(r.rating for r in seen))
            seen, times, total = visible[member.user]
            if settings.past_only:  # the shared item itself was rated at member.timestamp: not before it
                shown = seen[: bisect_left(times, member.timestamp)]
            else:
                shown = [r for r in seen if r.item != group.item]
            own = 0 if group.item in hidden else 1
            others = len(seen) - own  # whole or half stars: the sum less one rating is exact
            # the item's neighbours scored through the postings once, or, where a history is shorter than that
            # (a sample of a large catalog: a common term's postings span it), this history's items alone
            if scores is None and len(shown) * len(terms) >= cost:
                scores = bm25.scores(terms)
            if scores is not None:
                ranked = heapq.nsmallest(settings.k, shown, key=lambda r: (-scores.get(r.item, 0.0), -r.timestamp))
            else:
                ranked = heapq.nsmallest(settings.k, shown, key=lambda r: (-bm25.score(r.item, terms), -r.timestamp))
            # with every other item hidden, the mean behind the relative rating is all that can be shown
            mean = (total - own * member.rating) / others if others else member.rating - member.relative
            block = {
                "label": label,
                "user": member.user,
                "mean_rating": round(mean, 3),
                "history": [{"title": item_title(items, r.item), "rating": r.rating} for r in ranked],
                "profile": NO_EARLIER if not shown else None,
                "rating": member.rating,
                "relative_rating": round(member.relative, 4),
            }
            group.users.append(block)
            if shown and settings.profile and settings.past_only:  # a prefix: stated along the user's walk
                profiles.setdefault(member.user, []).append((len(shown), block))
            elif shown and settings.profile:
                block["profile"] = profile_text(shown, items, scale)
    for user, wanted in tqdm(profiles.items(), desc="profiles", unit="user", disable=None):
        profile, seen = Profile(items, scale), visible[user][0]
        for count, block in sorted(wanted, key=lambda w: w[0]):
            while profile.count < count:
                profile.add(seen[profile.count])
            block["profile"] = profile.text()


def group_record(
    group: Group, items: dict[str, CatalogItem], domain: str, scale: list[float] | None = None
) -> PerRecGroup:
    """The group as stored, once: its rows in every format derive from it (``PerRecGroup.rows``)."""
    info = items.get(group.item) or CatalogItem(group.item, item_title(items, group.item))
    item = {"id": info.id, "title": info.name, "categories": info.categories, "description": info.description}
    return PerRecGroup(group.id, NAME, domain, group.difficulty, item, group.users, scale)


def sample_groups(
    store: RatingStore, settings: GroupSettings, limit: int | None, seed: int
) -> tuple[list[Group], dict | None]:
    """The groups, or with ``limit`` (``--max-groups``) a seeded sample stratified by difficulty, and its record
    for ``stats.json``. A sample counts the groups in one pass and keeps its own in a second, so memory holds
    the sample, not every group (ML-25M has millions)."""
    if limit is None:
        return list(find_groups(store, settings)), None
    sizes = Counter(g.difficulty for g in find_groups(store, settings))
    if sum(sizes.values()) <= limit:
        return list(find_groups(store, settings)), None
    chosen, record = stratified_choice(dict(sizes), limit, seed, "groups", "difficulty")
    ordinals: Counter[str] = Counter()
    kept = []
    for group in find_groups(store, settings):
        if ordinals[group.difficulty] in chosen[group.difficulty]:
            kept.append(group)
        ordinals[group.difficulty] += 1
    return kept, record


def split_by_item(groups: list[Group], test_size: float, seed: int) -> tuple[list[Group], list[Group]]:
    """Every group of an item lands in the same split (no item is in both); deterministic for a seed."""
    if not 0.0 <= test_size <= 1.0:
        raise RecTuneError(f"test size must be in [0, 1], got {test_size}")
    item_ids = sorted({g.item for g in groups})
    random.Random(seed).shuffle(item_ids)
    test_items = set(item_ids[: round(test_size * len(item_ids))])
    return [g for g in groups if g.item not in test_items], [g for g in groups if g.item in test_items]


def members_without_earlier_ratings(groups: list[Group]) -> int:
    """Users shown with NO_EARLIER: nothing rated before the shared item (or all of it held out)."""
    return sum(u["profile"] == NO_EARLIER for g in groups for u in g.users)


def stats(train: list[Group], test: list[Group], store: RatingStore, settings: GroupSettings) -> dict:
    def counts(groups: list[Group]) -> dict:
        return {
            "groups": len(groups),
            "items": len({g.item for g in groups}),
            "by_size": dict(sorted(Counter(str(len(g.members)) for g in groups).items())),
            "by_difficulty": {d: sum(g.difficulty == d for g in groups) for d in DIFFICULTIES},
        }

    # eligible users: min_history other ratings, the only ones a group may hold; tied ratings: sharing their
    # second with another of the same user's (ordered by numeric item id)
    facts = store.user_facts(settings.min_history)
    return {
        "users": facts["users"],
        "eligible_users": facts["eligible_users"],
        "users_in_groups": len({m.user for g in [*train, *test] for m in g.members}),
        "tied_ratings": facts["tied_ratings"],
        "settings": vars(settings),
        "train": counts(train),
        "test": counts(test),
    }
