"""Score completions against canonical rows of any benchmark and build the report.

:func:`score_benchmark` looks the rows' benchmark up in the registry and scores each
prediction once. Every report has ``benchmark``, ``overall``, ``by_task``, ``metrics`` (the
metric names of its summaries), ``table`` (Markdown) and ``per_query``.
"""

from __future__ import annotations

import os
from dataclasses import asdict

from rectune.benchmarks import Resources, Scored, get_benchmark, load_rows
from rectune.core.gc_pause import collection_paused
from rectune.core.io import DataError, RecTuneError, write_json
from rectune.data.completions import DEFAULT_LIMITS, CompletionLimits, answer_text
from rectune.evaluation.answer_files import check_failures, load_answers, resolve_ids


def check_coverage(rows: list, predictions: dict[str, str], path: str | os.PathLike, allow_subset: bool) -> list:
    """The rows to score; unknown prediction ids, or missing ones unless ``allow_subset``, are errors."""
    ids = {row.id for row in rows}
    unknown = sorted(set(predictions) - ids)
    if unknown:
        raise DataError(path, f"{len(unknown)} predictions for ids not in the data: {_preview(unknown)}")
    missing = [row.id for row in rows if row.id not in predictions]
    if missing and not allow_subset:
        raise DataError(
            path,
            f"{len(missing)} test ids have no prediction: {_preview(missing)} (evaluate/score.py --allow-subset "
            "scores the ids that have one)",
        )
    return [row for row in rows if row.id in predictions]


def _preview(ids: list[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")


def score_benchmark(rows: list, predictions: dict[str, str], resources: Resources) -> tuple[dict, list[dict]]:
    """The report (with ``table`` and ``per_query``) and a per-query table for W&B and ``details.jsonl``."""
    report, scored = _score(rows, predictions, resources)
    return report, scored.table


def _score(rows: list, predictions: dict[str, str], resources: Resources) -> tuple[dict, Scored]:
    """The report (with ``table`` and ``per_query``) and what the benchmark scored, its table not yet built.

    Each completion is scored on its answer (:func:`~rectune.data.completions.answer_text`: clean text,
    reasoning blocks removed, capped at ``resources.limits``); ``report["completions"]`` counts how
    many had reasoning removed or were cut by a cap.
    """
    benchmark = get_benchmark(rows[0].benchmark if rows else None)
    if resources.convention not in benchmark.conventions:
        raise RecTuneError(
            f"{benchmark.name} has no {resources.convention!r} metrics; it has: {', '.join(benchmark.conventions)}"
        )
    with collection_paused():
        answers = {row_id: answer_text(text, resources.limits) for row_id, text in predictions.items()}
        scored = benchmark.score(rows, {row_id: a.text for row_id, a in answers.items()}, resources)
    report = {"benchmark": benchmark.name, **scored.report}
    report["completions"] = {
        "scored": len(rows),
        "reasoning_removed": sum(answers[r.id].reasoning_removed for r in rows if r.id in answers),
        "cut_at_max_chars": sum(answers[r.id].truncated for r in rows if r.id in answers),
        "cut_at_max_mentions": resources.mentions_capped(),
        **asdict(resources.limits),
    }
    report["table"] = benchmark.format_table(report)
    return report, scored


@collection_paused()  # a release's rows, answers and caches: the collector would walk them all again and again
def score_files(
    data: str | os.PathLike,
    predictions_path: str | os.PathLike,
    out: str | os.PathLike | None,
    *,
    catalog: str | os.PathLike | None = None,
    kg: str | os.PathLike | None = None,
    allow_subset: bool = False,
    fuzzy_cutoff: float = 90.0,
    limits: CompletionLimits = DEFAULT_LIMITS,
    task: str | None = None,
    convention: str = "default",
    top_k: int | None = None,
    score_failures_as_empty: bool = False,
    variant: dict | None = None,
) -> dict:
    """Score an answer file (any shape :func:`~rectune.evaluation.answer_files.load_answers` reads) against ``data``.

    ``task`` keeps that task's rows only, and bare release ids resolve within it. Failed requests in the file
    stop here unless ``score_failures_as_empty``; the report counts them.
    """
    rows = load_rows(data)
    if task is not None:
        rows = [row for row in rows if row.task == task]
        if not rows:
            raise DataError(data, f"no rows of task {task!r}")
    answers = load_answers(predictions_path)
    predictions = resolve_ids(answers.texts, rows, predictions_path, task)
    scored = check_coverage(rows, predictions, predictions_path, allow_subset)
    failed = resolve_ids(answers.failed, rows, predictions_path, task)
    check_failures(failed, len(scored), "answers", as_empty=score_failures_as_empty, source=predictions_path)
    resources = Resources(data, catalog, kg, fuzzy_cutoff, limits, convention=convention, top_k=top_k, variant=variant)
    report, _ = _score(scored, predictions, resources)  # the per-query table is not written here
    finished = resolve_ids(answers.finish_reasons, rows, predictions_path, task)
    recorded = [finished[row.id] for row in scored if row.id in finished]
    report["completions"]["cut_at_max_new_tokens"] = recorded.count("length") if recorded else None
    report["data"] = str(data)
    report["predictions"] = str(predictions_path)
    report["failed_requests"] = len(failed)
    if task is not None:
        report["task"] = task
    if out is not None:
        write_json(out, report, line_per_item=("per_query",))
    return report
