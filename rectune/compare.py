"""Side-by-side comparison of evaluation reports: checkpoints x tasks x metrics."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from rectune.io import DataError, atomic_write, read_json

METRIC_LABELS = {"precision": "P", "recall": "R", "cmr": "CMR", "ftr": "FTR", "tau": "τ", "failure_rate": "fail"}
RECBENCH_METRICS = ["precision", "recall", "cmr", "ftr"]


def report_metrics(reports: dict[str, dict]) -> list[str]:
    """The metrics to compare: those the reports list (RecBench+'s four for reports that list none)."""
    metrics: list[str] = []
    for report in reports.values():
        metrics += [m for m in report.get("metrics", RECBENCH_METRICS) if m not in metrics and m != "kg_coverage"]
    return metrics


def _label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def load_reports(paths: list[str | os.PathLike]) -> dict[str, dict]:
    """``{name: report}`` from report folders or report.json files; names are the folder names."""
    reports: dict[str, dict] = {}
    for raw in paths:
        path = Path(raw)
        file = path / "report.json" if path.is_dir() else path
        if not file.is_file():
            raise DataError(file, "no report here (run evaluate/run.py or evaluate/score.py first)")
        report = read_json(file)
        if not isinstance(report, dict) or "by_task" not in report or "overall" not in report:
            raise DataError(file, "not a RecTune report (needs 'by_task' and 'overall')")
        name = path.name if path.is_dir() else path.parent.name or path.stem
        if name in reports:
            name = str(path)
        reports[name] = report
    if not reports:
        raise DataError("reports", "no reports given")
    return reports


def comparison_rows(reports: dict[str, dict]) -> list[dict]:
    """One row per (checkpoint, task), tasks in first-seen order, ``overall`` last."""
    metrics = report_metrics(reports)
    tasks: list[str] = []
    for report in reports.values():
        tasks += [t for t in report["by_task"] if t not in tasks]
    rows = []
    for task in [*tasks, "overall"]:
        for name, report in reports.items():
            summary = report["overall"] if task == "overall" else report["by_task"].get(task)
            if summary is None:
                continue
            rows.append({"task": task, "checkpoint": name, "n": summary["n"], **{m: summary.get(m) for m in metrics}})
    return rows


def _cell(value: object) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def _metrics(rows: list[dict]) -> list[str]:
    return [key for key in rows[0] if key not in ("task", "checkpoint", "n")] if rows else []


def markdown(rows: list[dict]) -> str:
    metrics = _metrics(rows)
    header = ["task", "checkpoint", "n", *map(_label, metrics)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        values = [row["task"], row["checkpoint"], row["n"], *(row[m] for m in metrics)]
        lines.append("| " + " | ".join(_cell(v) for v in values) + " |")
    return "\n".join(lines)


def write_outputs(rows: list[dict], prefix: str | os.PathLike) -> list[Path]:
    """``PREFIX.md``, ``PREFIX.csv`` and ``PREFIX.png`` (grouped bars per metric and task)."""
    prefix = Path(prefix)
    with atomic_write(prefix.with_suffix(".md")) as handle:
        handle.write(markdown(rows) + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["task", "checkpoint", "n", *_metrics(rows)])
    writer.writeheader()
    writer.writerows(rows)
    with atomic_write(prefix.with_suffix(".csv")) as handle:
        handle.write(buffer.getvalue())
    _chart(rows, prefix.with_suffix(".png"))
    return [prefix.with_suffix(s) for s in (".md", ".csv", ".png")]


def _chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    names = list(dict.fromkeys(r["checkpoint"] for r in rows))
    by_key = {(r["task"], r["checkpoint"]): r for r in rows}
    metrics = _metrics(rows)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3.6), sharey=True, squeeze=False)
    width = 0.8 / len(names)
    low = min([0.0] + [r[m] for r in rows for m in metrics if r[m] is not None])
    for ax, metric in zip(axes[0], metrics, strict=True):
        for j, name in enumerate(names):
            values = [(by_key.get((t, name)) or {}).get(metric) or 0.0 for t in tasks]
            ax.bar([i + j * width for i in range(len(tasks))], values, width, label=name)
        ax.set_title(_label(metric))
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tasks))], tasks, rotation=30, ha="right")
        ax.set_ylim(low, 1)  # Kendall's τ can be negative
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
