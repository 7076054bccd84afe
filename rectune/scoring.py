"""Score completions against canonical rows of any benchmark and build the report.

:func:`score_benchmark` dispatches on the rows' ``benchmark``: RecBench+ (title matching,
P/R/CMR/FTR), PerRecBench (Kendall's τ per group) or LLMRec (per-task metrics). Every report
has ``overall``, ``by_task``, ``metrics`` (the metric names of its summaries) and ``table``.
"""

from __future__ import annotations

import os
from dataclasses import asdict

from rectune import llmrec, perrec
from rectune.catalog import KnowledgeGraph, beside, load_catalog, load_kg
from rectune.io import DataError, numbered_jsonl, write_json
from rectune.metrics import METRICS, QueryScore, aggregate, format_table, score_query
from rectune.schema import BenchmarkRow, Row, load_rows
from rectune.titles import TitleMatcher


def load_predictions(path: str | os.PathLike) -> dict[str, str]:
    """``{"id": str, "completion": str}`` rows; a duplicate id is an error."""
    predictions: dict[str, str] = {}
    for line, raw in numbered_jsonl(path):
        if not isinstance(raw.get("id"), str):
            raise DataError(path, "field 'id': must be a string", line=line)
        if not isinstance(raw.get("completion"), str):
            raise DataError(path, f"row {raw['id']!r}, field 'completion': must be a string", line=line)
        if raw["id"] in predictions:
            raise DataError(path, f"field 'id': duplicate prediction for {raw['id']!r}", line=line)
        predictions[raw["id"]] = raw["completion"]
    return predictions


def check_coverage(
    rows: list[BenchmarkRow], predictions: dict[str, str], path: str | os.PathLike, allow_subset: bool
) -> list[BenchmarkRow]:
    """The rows to score; unknown prediction ids, or missing ones unless ``allow_subset``, are errors."""
    ids = {row.id for row in rows}
    unknown = sorted(set(predictions) - ids)
    if unknown:
        raise DataError(path, f"{len(unknown)} predictions for ids not in the data: {_preview(unknown)}")
    missing = [row.id for row in rows if row.id not in predictions]
    if missing and not allow_subset:
        raise DataError(
            path, f"{len(missing)} test ids have no prediction: {_preview(missing)} (--allow-subset scores the rest)"
        )
    return [row for row in rows if row.id in predictions]


def _preview(ids: list[str], limit: int = 10) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")


def score_rows(
    rows: list[BenchmarkRow], predictions: dict[str, str], matcher: TitleMatcher, kg: KnowledgeGraph
) -> list[QueryScore]:
    extractions = matcher.extract_many([predictions[row.id] for row in rows])
    return [score_query(row, extraction, matcher, kg) for row, extraction in zip(rows, extractions, strict=True)]


def query_table(
    rows: list[BenchmarkRow], predictions: dict[str, str], scores: list[QueryScore], matcher: TitleMatcher
) -> list[dict]:
    """One record per query: what it asked, what came back, what it resolved to and how it scored."""
    table = []
    for row, score in zip(rows, scores, strict=True):
        extraction = matcher.extract(predictions[row.id])  # cached by the scoring pass
        table.append(
            {
                "id": row.id,
                "task": row.task,
                "query": row.query,
                "ground_truth": "\n".join(row.ground_truth),
                "completion": predictions[row.id],
                "resolved": "\n".join(matcher.items[i].title for i in extraction.item_ids),
                "unresolved": "\n".join(extraction.unresolved),
                "precision": score.precision,
                "recall": score.recall,
                "cmr": score.cmr,
                "ftr": score.ftr,
            }
        )
    return table


def score_benchmark(
    rows: list[Row],
    predictions: dict[str, str],
    data: str | os.PathLike,
    *,
    catalog: str | os.PathLike | None = None,
    kg: str | os.PathLike | None = None,
    fuzzy_cutoff: float = 90.0,
) -> tuple[dict, list[dict]]:
    """The report (with ``table`` and ``per_query``) and a per-query table for W&B."""
    benchmark = rows[0].benchmark if rows else "recbench+"
    if benchmark == "perrecbench":
        scores = perrec.score_groups(rows, predictions)
        report = perrec.aggregate(scores)
        report["table"] = perrec.format_table(report)
        table = perrec.query_table(rows, predictions, scores)
    elif benchmark == "llmrec":
        matcher = None  # only ranking answers are matched against the catalog
        if any(row.task in llmrec.RANKING_TASKS for row in rows):
            matcher = TitleMatcher(load_catalog(beside(data, "catalog.jsonl", catalog)), fuzzy_cutoff=fuzzy_cutoff)
        scores = llmrec.score_queries(rows, predictions, matcher)
        report = llmrec.aggregate(scores, rows)
        report["table"] = llmrec.format_table(report)
        table = llmrec.query_table(rows, predictions, scores)
    else:
        matcher = TitleMatcher(load_catalog(beside(data, "catalog.jsonl", catalog)), fuzzy_cutoff=fuzzy_cutoff)
        graph = load_kg(beside(data, "kg.jsonl", kg))
        scores = score_rows(rows, predictions, matcher, graph)
        report = {"metrics": [*METRICS, "kg_coverage"], **aggregate(scores)}
        report["table"] = format_table(report)
        table = query_table(rows, predictions, scores, matcher)
    report["per_query"] = [asdict(s) for s in scores]
    return report, table


def score_files(
    data: str | os.PathLike,
    predictions_path: str | os.PathLike,
    out: str | os.PathLike | None,
    *,
    catalog: str | os.PathLike | None = None,
    kg: str | os.PathLike | None = None,
    allow_subset: bool = False,
    fuzzy_cutoff: float = 90.0,
) -> dict:
    rows = load_rows(data)
    predictions = load_predictions(predictions_path)
    scored = check_coverage(rows, predictions, predictions_path, allow_subset)
    report, _ = score_benchmark(scored, predictions, data, catalog=catalog, kg=kg, fuzzy_cutoff=fuzzy_cutoff)
    report["data"] = str(data)
    report["predictions"] = str(predictions_path)
    if out is not None:
        write_json(out, report)
    return report
