"""Paired bootstrap confidence intervals for the difference between two checkpoints' metrics.

Both reports score the same units (queries; PerRecBench: groups) of each task they share, matched by
id; a task only one of them scores (a baseline answering some tasks only) has no interval, and
``overall`` has one only when they score the same units throughout. Each of
``samples`` resamples draws n units with replacement (one index set for both checkpoints: paired),
computes each metric on both (the mean of the units' values, then the benchmark's transform, e.g.
RMSE's square root) and keeps the difference. The interval is the 2.5th and 97.5th percentile of
those differences; the point estimate is the difference on the full set. Seeded: the same reports
and seed give the same interval. Over fewer than ``MIN_UNITS`` units the resamples repeat a handful of
values (over one, every resample is the one difference), so such an interval settles nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rectune.benchmarks import get_benchmark
from rectune.core.io import DataError
from rectune.evaluation.report_files import unit_id

MIN_UNITS = 10


@dataclass(frozen=True)
class Difference:
    """``value`` minus the baseline's, with its 95 % interval over ``n`` units."""

    delta: float
    low: float
    high: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def settled(self) -> bool:
        """The interval excludes 0 and rests on at least ``MIN_UNITS`` units."""
        return self.excludes_zero and self.n >= MIN_UNITS


def units(report: dict) -> dict[str, dict]:
    """``{unit id: per_query record}`` of a report."""
    records = report.get("per_query")
    if not records:
        raise DataError("report", "has no per-query scores (written by an older RecTune?): no interval possible")
    return {unit_id(r): r for r in records}


def paired_differences(
    report: dict, baseline: dict, tasks: list[str], samples: int = 1000, seed: int = 0
) -> dict[str, dict[str, Difference]]:
    """``{task or "overall": {metric: Difference}}`` of ``report`` against ``baseline``."""
    benchmark = get_benchmark(report.get("benchmark"))
    mine, theirs = units(report), units(baseline)
    shared_tasks = {r["task"] for r in mine.values()} & {r["task"] for r in theirs.values()}
    for task in sorted(shared_tasks):
        a = {i for i, r in mine.items() if r["task"] == task}
        b = {i for i, r in theirs.items() if r["task"] == task}
        if a != b:
            only = sorted(a ^ b)
            raise DataError("reports", f"score different queries ({len(only)} differ, e.g. {only[0]}): not comparable")
    same_units = mine.keys() == theirs.keys()
    ids = sorted(i for i in mine if mine[i]["task"] in shared_tasks)
    if not ids:
        return {}
    values = {side: [benchmark.unit_values(records[i]) for i in ids] for side, records in (("a", mine), ("b", theirs))}
    task_of = np.array([mine[i]["task"] for i in ids])
    rng = np.random.default_rng(seed)
    result: dict[str, dict[str, Difference]] = {}
    for task in [*tasks, *(["overall"] if same_units else [])]:
        chosen = np.flatnonzero(task_of == task) if task != "overall" else np.arange(len(ids))
        if not len(chosen):
            continue
        draws = rng.integers(0, len(chosen), size=(samples, len(chosen)))
        result[task] = {}
        for metric in benchmark.metrics:
            a = _column(values["a"], metric, chosen)
            b = _column(values["b"], metric, chosen)
            if np.isnan(a).all() or np.isnan(b).all():
                continue
            transform = benchmark.metric_transforms.get(metric, lambda x: x)
            delta = _metric(a, transform) - _metric(b, transform)
            resampled = _metric(a[draws], transform) - _metric(b[draws], transform)
            low, high = np.nanpercentile(resampled, [2.5, 97.5])
            result[task][metric] = Difference(float(delta), float(low), float(high), len(chosen))
    return result


def _column(rows: list[dict], metric: str, chosen: np.ndarray) -> np.ndarray:
    return np.array([np.nan if rows[i][metric] is None else rows[i][metric] for i in chosen], dtype=float)


def _metric(values: np.ndarray, transform) -> np.ndarray | float:
    """The mean over the last axis, ignoring units without a value, then ``transform``."""
    with np.errstate(invalid="ignore"):
        counts = (~np.isnan(values)).sum(axis=-1)
        means = np.where(counts > 0, np.nansum(values, axis=-1) / np.maximum(counts, 1), np.nan)
    return np.vectorize(transform, otypes=[float])(means) if np.ndim(means) else transform(float(means))
