"""Seeded stratified samples: ``--max-groups`` (PerRecBench) and ``--max-users`` (LLMRec, the builder).

A sample keeps each stratum's share of the whole (``limit × n_s / N``, rounded down, the remaining
places going to the largest remainders, ties in stratum order), draws each stratum's members with
its own seeded generator, and keeps the input order. Its record, which ``stats.json`` stores, holds
the unsampled totals beside what was kept, so a sampled build still says how large the full one is.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from rectune.io import RecTuneError

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


def stratified_sample(
    members: Sequence[T], stratum: Callable[[T], str], limit: int | None, seed: int, what: str, by: str
) -> tuple[list[T], dict | None]:
    """At most ``limit`` of ``members`` (all of them, and no record, when there are no more than that)."""
    if limit is None or len(members) <= limit:
        return list(members), None
    if limit < 1:
        raise RecTuneError(f"the sample of {what} must hold at least 1, got {limit}")
    strata: dict[str, list[int]] = {}
    for index, member in enumerate(members):
        strata.setdefault(stratum(member), []).append(index)
    places = shares({s: len(indices) for s, indices in strata.items()}, limit)
    kept = sorted(i for s, indices in strata.items() for i in random.Random(f"{seed}/{s}").sample(indices, places[s]))
    record = {
        what: {"found": len(members), "kept": limit},
        "stratified_by": by,
        "seed": seed,
        "found": {s: len(indices) for s, indices in sorted(strata.items())},
        "kept": dict(sorted(places.items())),
    }
    return [members[i] for i in kept], record
