"""Side-by-side comparison of evaluation reports: checkpoints x tasks x metrics."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from rectune.io import DataError, atomic_write, read_json

METRIC_LABELS = {"precision": "P", "recall": "R", "cmr": "CMR", "ftr": "FTR"}


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
    tasks: list[str] = []
    for report in reports.values():
        tasks += [t for t in report["by_task"] if t not in tasks]
    rows = []
    for task in [*tasks, "overall"]:
        for name, report in reports.items():
            summary = report["overall"] if task == "overall" else report["by_task"].get(task)
            if summary is None:
                continue
            rows.append(
                {"task": task, "checkpoint": name, "n": summary["n"], **{m: summary.get(m) for m in METRIC_LABELS}}
            )
    return rows


def _cell(value: object) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def markdown(rows: list[dict]) -> str:
    header = ["task", "checkpoint", "n", *METRIC_LABELS.values()]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        values = [row["task"], row["checkpoint"], row["n"], *(row[m] for m in METRIC_LABELS)]
        lines.append("| " + " | ".join(_cell(v) for v in values) + " |")
    return "\n".join(lines)


def write_outputs(rows: list[dict], prefix: str | os.PathLike) -> list[Path]:
    """``PREFIX.md``, ``PREFIX.csv`` and ``PREFIX.png`` (grouped bars per metric and task)."""
    prefix = Path(prefix)
    with atomic_write(prefix.with_suffix(".md")) as handle:
        handle.write(markdown(rows) + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=["task", "checkpoint", "n", *METRIC_LABELS])
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
    fig, axes = plt.subplots(1, len(METRIC_LABELS), figsize=(4 * len(METRIC_LABELS), 3.6), sharey=True)
    width = 0.8 / len(names)
    for ax, (metric, label) in zip(axes, METRIC_LABELS.items(), strict=True):
        for j, name in enumerate(names):
            values = [(by_key.get((t, name)) or {}).get(metric) or 0.0 for t in tasks]
            ax.bar([i + j * width for i in range(len(tasks))], values, width, label=name)
        ax.set_title(label)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tasks))], tasks, rotation=30, ha="right")
        ax.set_ylim(0, 1)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
