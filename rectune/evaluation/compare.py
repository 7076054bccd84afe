"""Side-by-side comparison of evaluation reports: checkpoints x tasks x metrics.

Metric labels, scales and directions come from each report's benchmark (its ``MetricSpec``s);
reports written before reports named their benchmark are looked up as RecBench+ reports.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

from rectune.benchmarks import MetricSpec, get_benchmark
from rectune.core.escaping import csv_cell, markdown_cell
from rectune.core.io import DataError, atomic_write, read_json
from rectune.evaluation.answer_files import load_answers
from rectune.evaluation.bootstrap import MIN_UNITS, paired_differences, units
from rectune.evaluation.report_files import report_name


def metric_specs(reports: dict[str, dict]) -> dict[str, MetricSpec]:
    """The metrics to compare, in the reports' order, with how to show each (coverage figures left out)."""
    specs: dict[str, MetricSpec] = {}
    for report in reports.values():
        known = get_benchmark(report.get("benchmark")).metrics
        # reports written before they listed their metrics: the known ones their summaries hold
        for metric in report.get("metrics") or [m for m in known if m in report.get("overall", {})]:
            if metric not in specs and metric != "kg_coverage":
                spec = known.get(metric, MetricSpec(metric))
                if report.get("k") and "@K" in spec.label:  # fixed-K metrics show their K
                    spec = MetricSpec(spec.label.replace("@K", f"@{report['k']}"), spec.scale, spec.higher_is_better)
                specs[metric] = spec
    return specs


def is_ceiling(report: dict) -> bool:
    """A baseline that reads what a model is not given (``kg-oracle``): shown as a ceiling, not a competitor."""
    baseline = report.get("baseline")
    return isinstance(baseline, dict) and baseline.get("ceiling") is True


def changed_answers(paths: list[str | os.PathLike], baseline: str) -> list[str]:
    """Per report folder holding ``predictions.jsonl``: how many of the queries it shares with the
    ``baseline`` folder got a different answer (exact text), e.g. ``rft: 92 of 377``. Greedy decoding
    makes this the plainest sign that training moved a checkpoint at all."""
    folders = {}
    for raw in paths:
        folder = Path(raw)
        if (folder / "predictions.jsonl").is_file():
            config = folder / "config.json"
            folders[report_name(folder, read_json(config) if config.is_file() else None)] = folder
    if baseline not in folders:
        return []
    before = load_answers(folders[baseline] / "predictions.jsonl").texts
    lines = []
    for name, folder in folders.items():
        if name != baseline:
            after = load_answers(folder / "predictions.jsonl").texts
            shared = before.keys() & after.keys()
            lines.append(f"{name}: {sum(before[i] != after[i] for i in shared)} of {len(shared)}")
    return lines


def other_queries_note(reports: dict[str, dict]) -> str:
    """A sentence naming the reports that score other queries than the first (their means are over other queries:
    a --limit of 3 beside a full run), or ``""``. With a baseline, the paired intervals refuse such pairs."""
    scored = {name: set(units(report)) for name, report in reports.items() if report.get("per_query")}
    if len({frozenset(ids) for ids in scored.values()}) <= 1:
        return ""
    first, *others = scored
    differ = ", ".join(f"{name} ({len(scored[name])})" for name in others if scored[name] != scored[first])
    return (
        f"Other queries than {first}'s {len(scored[first])} are scored by {differ}: means over other queries do "
        "not compare (evaluate each checkpoint with the same --limit or --sample)."
    )


def comparison_rows(
    reports: dict[str, dict], baseline: str | None = None, samples: int = 1000, seed: int = 0
) -> list[dict]:
    """One row per (checkpoint, task), tasks in first-seen order, ``overall`` last.

    With a ``baseline`` (a report name), each other checkpoint's row carries ``diff``: per metric, its
    difference to the baseline with a paired bootstrap 95 % interval (:mod:`rectune.evaluation.bootstrap`).
    """
    metrics = list(metric_specs(reports))
    tasks: list[str] = []
    for report in reports.values():
        tasks += [t for t in report["by_task"] if t not in tasks]
    if baseline is not None and baseline not in reports:
        raise DataError(baseline, f"no report of that name to compare with (reports: {', '.join(reports)})")
    if baseline is not None:
        _check_same_data(reports, baseline)
    differences = {
        name: paired_differences(report, reports[baseline], tasks, samples, seed)
        for name, report in reports.items()
        if baseline is not None and name != baseline
    }
    rows = []
    for task in [*tasks, "overall"]:
        for name, report in reports.items():
            summary = report["overall"] if task == "overall" else report["by_task"].get(task)
            if summary is None:
                continue
            shown = f"{name} (ceiling)" if is_ceiling(report) else name
            row = {"task": task, "checkpoint": shown, "n": summary["n"], **{m: summary.get(m) for m in metrics}}
            if name in differences:
                row["diff"] = {m: d for m, d in differences[name].get(task, {}).items() if m in metrics}
            rows.append(row)
    return rows


def _data_hash(report: dict) -> str | None:
    key = (report.get("config") or {}).get("predictions_key") if isinstance(report.get("config"), dict) else None
    return key.get("data_sha256") if isinstance(key, dict) else None


def _check_same_data(reports: dict[str, dict], baseline: str) -> None:
    """Paired intervals pair queries by id: refuse reports scored on other data than the baseline's (a
    closed-book and a grounded build of one release share their ids, not their questions)."""
    expected = _data_hash(reports[baseline])
    for name, report in reports.items():
        found = _data_hash(report)
        if expected and found and found != expected:
            raise DataError(
                name, f"was scored on other data than {baseline} (data_sha256 {found[:12]} vs {expected[:12]}): "
                "paired intervals would pair different queries; compare reports of one data file"
            )  # fmt: skip


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"  # a metric that is undefined (NaN) or overflowed (inf) shows as missing
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _metrics(rows: list[dict]) -> list[str]:
    return [key for key in rows[0] if key not in ("task", "checkpoint", "n", "diff")] if rows else []


def _with_difference(row: dict, metric: str) -> str:
    """``0.412 (+0.050 [+0.020, +0.080])*``: the value, its difference to the baseline and the 95 % interval;
    ``*`` when the interval settles the sign; ``n 3 < 10`` inside the brackets when too few units were scored."""
    cell = _cell(row[metric])
    diff = row.get("diff", {}).get(metric)
    if diff is None:
        return cell
    mark = "*" if diff.settled else ""
    few = f", n {diff.n} < {MIN_UNITS}" if diff.n < MIN_UNITS else ""
    return f"{cell} ({diff.delta:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}]{few}){mark}"


def _label(metric: str, specs: dict[str, MetricSpec]) -> str:
    spec = specs.get(metric)
    return spec.label if spec else metric


def markdown(rows: list[dict], specs: dict[str, MetricSpec]) -> str:
    metrics = _metrics(rows)
    header = ["task", "checkpoint", "n", *(_label(m, specs) for m in metrics)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        values = [markdown_cell(row["task"]), markdown_cell(row["checkpoint"]), _cell(row["n"])]
        lines.append("| " + " | ".join([*values, *(_with_difference(row, m) for m in metrics)]) + " |")
    if any("diff" in row for row in rows):
        lines += ["", DIFFERENCE_NOTE]
    return "\n".join(lines)


DIFFERENCE_NOTE = (
    "In brackets: the difference to the baseline and its paired bootstrap 95 % interval over queries "
    f"(PerRecBench: groups); * marks an interval that excludes 0 over at least {MIN_UNITS} of them; "
    f"one over fewer says n < {MIN_UNITS} and settles nothing."
)


OUTPUT_SUFFIXES = (".md", ".csv", ".png")


def write_outputs(rows: list[dict], specs: dict[str, MetricSpec], paths: list[Path], note: str = "") -> None:
    """The table (and ``note`` below it) as Markdown, the table as CSV, and a chart of grouped bars per
    metric and task (``OUTPUT_SUFFIXES``)."""
    table, sheet, chart = paths
    png = _chart(rows, specs)  # drawn first: a chart matplotlib refuses leaves no table behind
    with atomic_write(table) as handle:
        handle.write(markdown(rows, specs) + (f"\n\n{markdown_cell(note)}" if note else "") + "\n")
    buffer = io.StringIO()
    metrics = _metrics(rows)
    extra = [f"{m}_{part}" for m in metrics for part in ("delta", "low", "high")] if _has_diff(rows) else []
    writer = csv.DictWriter(buffer, fieldnames=["task", "checkpoint", "n", *metrics, *extra])
    writer.writeheader()
    for row in rows:
        flat = {key: csv_cell(value) for key, value in row.items() if key != "diff"}
        for metric, diff in row.get("diff", {}).items():
            flat.update({f"{metric}_delta": diff.delta, f"{metric}_low": diff.low, f"{metric}_high": diff.high})
        writer.writerow(flat)
    with atomic_write(sheet) as handle:
        handle.write(buffer.getvalue())
    with atomic_write(chart, "wb") as handle:  # a tagged, exclusive temporary file: no link is followed
        handle.write(png)


def _has_diff(rows: list[dict]) -> bool:
    return any(row.get("diff") for row in rows)


def axis_limits(spec: MetricSpec, values: list[float]) -> tuple[float, float]:
    """An axis that fits the values: from the scale's floor (or the lowest value) to 15 % above the largest,
    no further than the scale's top, so values of 0.01–0.05 are not flattened against a 0–1 axis."""
    low, high = spec.limits
    top = max(values, default=0.0) * 1.15
    if top <= 0:
        top = high if high is not None else 1.0
    return min([low, *values]), min(high, top) if high is not None else top


def _error_bars(by_key: dict, tasks: list[str], name: str, metric: str) -> list[list[float]] | None:
    """Below/above each bar: the 95 % interval of the difference to the baseline, placed on the bar."""
    rows = [by_key.get((t, name)) or {} for t in tasks]
    diffs = [row.get("diff", {}).get(metric) for row in rows]
    if not any(diffs):
        return None
    # a percentile interval need not hold the observed difference (few queries, few resamples, a ratio metric):
    # its whisker on that side is then empty, not negative (matplotlib refuses those)
    low = [max(0.0, d.delta - d.low) if d else 0.0 for d in diffs]
    high = [max(0.0, d.high - d.delta) if d else 0.0 for d in diffs]
    return [low, high]


def charted_metrics(rows: list[dict]) -> list[str]:
    """The metrics that get a panel: those with a value somewhere (closed-book data has no candidate recall)."""
    return [metric for metric in _metrics(rows) if any(_finite(row.get(metric)) for row in rows)]


MAX_LABELLED_BARS = 16  # beyond this a panel's value labels run into each other; the table has the values


def _chart(rows: list[dict], specs: dict[str, MetricSpec]) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    # names come from folders and reports: a `$` there was read as TeX (`run$\frac{1$` a traceback)
    with matplotlib.rc_context({"text.parse_math": False}):
        return _drawn_chart(rows, specs)


def _drawn_chart(rows: list[dict], specs: dict[str, MetricSpec]) -> bytes:
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    names = list(dict.fromkeys(r["checkpoint"] for r in rows))
    by_key = {(r["task"], r["checkpoint"]): r for r in rows}
    metrics = charted_metrics(rows) or _metrics(rows)[:1]
    columns = min(len(metrics), 4)  # a grid, so a benchmark with many metrics stays readable
    grid_rows = math.ceil(len(metrics) / columns)
    width_per_panel = max(4.0, 0.5 * len(tasks) * len(names) ** 0.5)
    fig, axes = plt.subplots(grid_rows, columns, figsize=(width_per_panel * columns, 3.8 * grid_rows + 0.6),
                             squeeze=False)  # fmt: skip
    width = 0.8 / len(names)
    labelled = len(tasks) * len(names) <= MAX_LABELLED_BARS
    for ax, metric in zip(axes.flat, metrics, strict=False):
        spec = specs.get(metric, MetricSpec(metric))
        present = [r[metric] for r in rows if _finite(r[metric])]
        present += [  # the error bars' tops fit too
            r[metric] + r["diff"][metric].high - r["diff"][metric].delta
            for r in rows
            if _finite(r[metric]) and metric in r.get("diff", {})
        ]
        for j, name in enumerate(names):
            values = [(by_key.get((t, name)) or {}).get(metric) for t in tasks]
            bars = ax.bar(
                [i + j * width for i in range(len(tasks))],
                [v if _finite(v) else math.nan for v in values],
                width,
                label=name,
                yerr=_error_bars(by_key, tasks, name, metric),
                capsize=2,
            )
            if labelled:  # upright, so neighbouring bars' labels never overlap
                ax.bar_label(bars, fmt="%.2f" if spec.scale != "percent" else "%.1f", fontsize=6, padding=2,
                             rotation=90)  # fmt: skip
        arrow = "↑" if spec.higher_is_better else "↓"
        exception = "\n(↑ on misinformed: refusing is right)" if metric == "ftr" and "misinformed" in tasks else ""
        ax.set_title(f"{spec.label} ({arrow} better){exception}", fontsize=9)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tasks))], tasks, rotation=30, ha="right")
        low, high = axis_limits(spec, present)
        ax.set_ylim(low, high + (high - low) * (0.25 if labelled else 0.0))  # room for the upright labels
    for ax in list(axes.flat)[len(metrics) :]:
        ax.axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    # one legend above the panels, where no bar is
    fig.legend(handles, labels, loc="upper center", ncol=min(len(names), 6), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=110)
    finally:
        plt.close(fig)
    return png.getvalue()
