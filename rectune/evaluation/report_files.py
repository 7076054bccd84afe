"""Evaluation reports read back for comparison: found, checked whole, named.

Reports travel (a colleague's ``reports/`` folder, a hand-edited ``report.json``), so each is checked for
every shape compare reads before any table is made: a field of the wrong type is one line naming the file
and the field or per-query record, not a traceback halfway through the bootstrap.
"""

from __future__ import annotations

import os
from pathlib import Path

from rectune.benchmarks import Benchmark, get_benchmark
from rectune.core.io import DataError, RecTuneError, read_json


def load_reports(paths: list[str | os.PathLike], *, by_difficulty: bool = False) -> dict[str, dict]:
    """``{name: report}`` from report folders or report.json files; names are the folder names, a
    baseline's its checkpoint (``baseline:bm25``). ``by_difficulty``: each report split into its
    difficulty tiers (:func:`split_by_difficulty`)."""
    reports: dict[str, dict] = {}
    given: dict[str, str | os.PathLike] = {}  # each report file once: twice, it was a row compared with itself
    for raw in paths:
        path = Path(raw)
        file = path / "report.json" if path.is_dir() else path
        if not file.is_file():
            raise DataError(file, "no report here (run evaluate/run.py or evaluate/score.py first)")
        real = os.path.realpath(file)
        if real in given:
            raise DataError(file, f"given twice ({given[real]} and {raw}); name each report once")
        given[real] = raw
        report = read_json(file)
        problem = report_problem(report)
        if problem:
            raise DataError(file, f"not a RecTune report ({problem})")
        if by_difficulty:
            report = split_by_difficulty(report, file)
        name = report_name(path, report.get("config"))
        if name in reports:
            name = str(path)
        reports[name] = report
    if not reports:
        raise DataError("reports", "no reports given")
    return reports


def report_problem(report: object) -> str | None:
    """What makes ``report`` unreadable as an evaluation report (the shapes compare reads), or None."""
    if not isinstance(report, dict) or not isinstance(report.get("overall"), dict):
        return "needs 'by_task' and 'overall' objects"
    by_task = report.get("by_task")
    if not isinstance(by_task, dict) or not all(isinstance(summary, dict) for summary in by_task.values()):
        return "needs 'by_task' and 'overall' objects"
    if not isinstance(report.get("metrics", []), list) or not isinstance(report.get("config", {}), dict):
        return "'metrics' must be a list and 'config' an object"
    if not all(isinstance(metric, str) for metric in report.get("metrics", [])):
        return "'metrics' must be a list of metric names"
    k = report.get("k")
    if k is not None and not (_is_count(k) and k > 0):
        return f"'k' must be a positive whole number, not {k!r}"
    problem = _summaries_problem({"overall": report["overall"], **{f"by_task.{t}": s for t, s in by_task.items()}})
    if problem:
        return problem
    key = report.get("config", {}).get("predictions_key")
    if key is not None and not (isinstance(key, dict) and isinstance(key.get("data_sha256", ""), str)):
        return "'config.predictions_key' must be an object whose 'data_sha256' is a string"
    if "benchmark" in report and not isinstance(report["benchmark"], str):
        return f"'benchmark' must be a benchmark's name, not {report['benchmark']!r}"
    try:
        benchmark = get_benchmark(report.get("benchmark"))
    except RecTuneError as err:
        return str(err)
    return _per_query_problem(report.get("per_query", []), benchmark)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: object) -> bool:
    """A metric's value: a number (NaN and inf stand for undefined and overflowed) or None, never a bool."""
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


def _summaries_problem(summaries: dict[str, dict]) -> str | None:
    for where, summary in summaries.items():
        if not _is_count(summary.get("n")):
            return f"{where}: 'n' must be a count of queries, not {summary.get('n')!r}"
        wrong = next((key for key, value in summary.items() if not _is_number(value)), None)
        if wrong is not None:
            return f"{where}: {wrong!r} is {summary[wrong]!r}, not a number"
    return None


def _per_query_problem(records: object, benchmark: Benchmark) -> str | None:
    """Per-query records: each with its task, one unit id each (queries by ``id``, PerRecBench's groups by
    task and ``group``), and the values the paired bootstrap resamples (the benchmark's ``unit_values``)."""
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and isinstance(r.get("task"), str) for r in records
    ):
        return "'per_query' must be a list of records, each with its 'task'"
    seen: set[str] = set()
    for index, record in enumerate(records, start=1):
        unit = unit_id(record)
        if unit is None:
            return f"per_query record {index}: no 'id' string (nor a 'group' of its task)"
        if unit in seen:
            return f"per_query record {index}: {unit!r} is scored twice"
        seen.add(unit)
        try:
            values = benchmark.unit_values(record)
        except (KeyError, TypeError, ValueError, ArithmeticError) as err:  # 1e200 squared: an OverflowError
            return f"per_query record {index} ({unit}): no {benchmark.name} scores ({type(err).__name__}: {err})"
        wrong = next((m for m, v in values.items() if not _is_number(v)), None)
        if wrong is not None:
            return f"per_query record {index} ({unit}): {wrong!r} is {values[wrong]!r}, not a number"
    return None


def unit_id(record: dict) -> str | None:
    """The unit a per-query record scores: its query ``id``, or a PerRecBench group as ``task/group``."""
    if isinstance(record.get("id"), str) and record["id"]:
        return record["id"]
    group = record.get("group")
    if isinstance(group, str | int) and not isinstance(group, bool):
        return f"{record['task']}/{group}"
    return None


def report_name(path: Path, config: dict | None) -> str:
    """A baseline's report is named by its checkpoint (``baseline:bm25``), any other by its folder."""
    if isinstance(config, dict) and config.get("kind") == "baseline" and isinstance(config.get("checkpoint"), str):
        return config["checkpoint"]
    return path.name if path.is_dir() else path.parent.name or path.stem


def split_by_difficulty(report: dict, file: str | os.PathLike = "report") -> dict:
    """The report with each task split into its difficulty tiers (``pairwise/hard``), summaries from its
    ``by_task_difficulty`` and per-query scores relabelled, so rows and intervals come per tier."""
    tiers = report.get("by_task_difficulty")
    records = report.get("per_query") or []
    if not isinstance(tiers, dict) or any(not isinstance(r.get("difficulty"), str) for r in records):
        raise DataError(file, "has no difficulty tiers (by_task_difficulty and per-query difficulty)")
    if not all(
        isinstance(by_tier, dict) and all(isinstance(s, dict) for s in by_tier.values()) for by_tier in tiers.values()
    ):
        raise DataError(file, "not a RecTune report ('by_task_difficulty' must map tasks to tiers' summaries)")
    split = {f"{task}/{tier}": summary for task, by_tier in tiers.items() for tier, summary in by_tier.items()}
    problem = _summaries_problem({f"by_task_difficulty.{name}": summary for name, summary in split.items()})
    if problem:
        raise DataError(file, f"not a RecTune report ({problem})")
    relabelled = [{**r, "task": f"{r['task']}/{r['difficulty']}"} for r in records]
    return {**report, "by_task": split, "per_query": relabelled}
