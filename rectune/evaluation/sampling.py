"""Which held-out rows an evaluation scores: a task filter, then the first N or a seeded sample stratified
by task.

A sample draws whole units (a PerRecBench group's rows go together, as they are scored together), from
each task in proportion to its share of the units (largest remainders first, ties to the earlier task;
when there are at least as many units as tasks, a task rounded to none takes one from the largest), and
keeps the rows in their file order, so ``--sample 50`` from a file sorted by task holds every task,
where ``--limit 50`` takes the first 50 rows.
"""

from __future__ import annotations

import random
from collections import defaultdict


def unit_of(row) -> str:
    """What is scored as one: a PerRecBench group in one format, else the row itself."""
    group = getattr(row, "group", None)
    return f"{row.task}/{group}" if group is not None else row.id


def stratified_sample(rows: list, n: int, seed: int = 0) -> list:
    """``n`` units (all when there are fewer) drawn per task in proportion, their rows in file order."""
    units: dict[str, list[str]] = defaultdict(list)  # task -> unit ids, in first-seen order
    for row in rows:
        unit = unit_of(row)
        if unit not in units[row.task]:
            units[row.task].append(unit)
    total = sum(len(u) for u in units.values())
    if n >= total:
        return list(rows)
    shares = {task: n * len(u) / total for task, u in units.items()}
    counts = {task: int(share) for task, share in shares.items()}
    by_remainder = sorted(units, key=lambda t: (-(shares[t] - counts[t]), list(units).index(t)))
    for task in by_remainder[: n - sum(counts.values())]:
        counts[task] += 1
    if n >= len(units):  # every task keeps a unit: the largest give theirs to those the rounding left out
        order = list(units)
        for task in [t for t in order if counts[t] == 0]:
            donor = max(order, key=lambda t: (counts[t], -order.index(t)))
            counts[donor] -= 1
            counts[task] += 1
    rng = random.Random(seed)
    chosen = {unit for task, u in units.items() for unit in rng.sample(u, counts[task])}
    return [row for row in rows if unit_of(row) in chosen]


def selection_record(tasks: list[str] | None, limit: int | None, sample: int | None, seed: int) -> dict:
    """How the scored queries were chosen (config.json's ``selection``): a rerun with these draws the same."""
    return {"tasks": tasks, "limit": limit, "sample": sample, "sample_seed": seed if sample is not None else None}


def selection_text(selection: dict | None) -> str:
    """``a sample of 10 (seed 0) of the first 50 of tasks explicit``; empty for every query."""
    selection = selection or {}
    parts = []
    if selection.get("sample") is not None:
        parts.append(f"a sample of {selection['sample']} (seed {selection.get('sample_seed')})")
    if selection.get("limit") is not None:
        parts.append(f"the first {selection['limit']}")
    if selection.get("tasks"):
        parts.append(f"tasks {', '.join(selection['tasks'])}")
    return " of ".join(parts)
