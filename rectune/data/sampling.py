"""Seeded stratified samples: ``--max-groups`` (PerRecBench) and ``--max-users`` (LLMRec, the builder).

A sample keeps each stratum's share of the whole (``limit × n_s / N``, rounded down, the remaining
places going to the largest remainders, ties in stratum order), draws each stratum's members with
its own seeded generator, and keeps the input order. Its record, which ``stats.json`` stores, holds
the unsampled totals beside what was kept, so a sampled build still says how large the full one is.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from rectune.core.io import RecTuneError

T = TypeVar("T")
ACTIVITY_BANDS = (10, 20, 50, 100, 200, 500)  # ratings per user: heavy-tailed, so bands grow


def activity_band(count: int) -> str:
    """A user's stratum by how many ratings they have: ``1-9``, ``10-19``, ``20-49``, ..., ``500+``."""
    low = 1
    for high in ACTIVITY_BANDS:
        if count < high:
            return f"{low}-{high - 1}"
        low = high
    return f"{low}+"


def shares(sizes: dict[str, int], limit: int) -> dict[str, int]:
    """How many of ``limit`` places each stratum gets: proportional, largest remainders first."""
    total = sum(sizes.values())
    exact = {s: limit * n / total for s, n in sizes.items()}
    places = {s: int(x) for s, x in exact.items()}
    by_remainder = sorted(sizes, key=lambda s: -(exact[s] - places[s]))  # sorted() is stable: stratum order on ties
    for stratum in by_remainder[: limit - sum(places.values())]:
        places[stratum] += 1
    return places


def sample_users(
    users: Sequence[str], counts: Mapping[str, int], limit: int | None, seed: int
) -> tuple[list[str], dict | None]:
    """``--max-users`` (LLMRec, the builder): a seeded sample of ``users`` stratified by activity band
    (``counts``: ratings per user), in the order given."""
    return stratified_sample(users, lambda u: activity_band(counts[u]), limit, seed, "users", "activity")


def stratified_sample(
    members: Sequence[T], stratum: Callable[[T], str], limit: int | None, seed: int, what: str, by: str
) -> tuple[list[T], dict | None]:
    """At most ``limit`` of ``members`` (all of them, and no record, when there are no more than that)."""
    if limit is None or len(members) <= limit:
        return list(members), None
    strata: dict[str, list[int]] = {}
    for index, member in enumerate(members):
        strata.setdefault(stratum(member), []).append(index)
    chosen, record = stratified_choice({s: len(indices) for s, indices in strata.items()}, limit, seed, what, by)
    kept = sorted(strata[s][n] for s, ordinals in chosen.items() for n in ordinals)
    return [members[i] for i in kept], record


def stratified_choice(
    sizes: dict[str, int], limit: int, seed: int, what: str, by: str
) -> tuple[dict[str, set[int]], dict]:
    """The sample of :func:`stratified_sample` given the strata's sizes only: per stratum, the ordinals (from 0,
    in input order) of the members kept, and the record. A stream too large to hold (PerRecBench's groups at
    ML-25M) is counted in one pass and sampled in a second. ``random.sample`` picks positions by the
    population's size alone, so drawing ordinals picks the same members as drawing from the list."""
    if limit < 1:
        raise RecTuneError(f"the sample of {what} must hold at least 1, got {limit}")
    places = shares(sizes, limit)
    chosen = {s: set(random.Random(f"{seed}/{s}").sample(range(n), places[s])) for s, n in sizes.items()}
    record = {
        what: {"found": sum(sizes.values()), "kept": limit},
        "stratified_by": by,
        "seed": seed,
        "found": dict(sorted(sizes.items())),
        "kept": dict(sorted(places.items())),
    }
    return chosen, record
