"""A scored checkpoint's results in its model card.

When ``evaluate/run.py`` scores a folder a RecTune training run wrote and sealed, the folder's card
(``README.md``) gains an *Evaluation* section: one row per data file, metric convention and number of
queries scored, the last score of each kept, from ``evaluations.json`` beside it. Only a card RecTune
wrote and nobody has edited since is touched (the folder's marker vouches for it, and is resealed
after), and only when no other process holds the folder; otherwise the card is left alone and the
reason printed.
"""

from __future__ import annotations

import os
from pathlib import Path

from rectune.benchmarks import get_benchmark
from rectune.core.escaping import markdown_cell
from rectune.core.io import RecTuneError, atomic_write, read_json, write_json
from rectune.core.outputs import changed_files, lock_output, read_marker, write_marker
from rectune.evaluation.sampling import selection_text

RESULTS = "evaluations.json"
CARD = "README.md"
TRAINING_KIND = "training run"  # what a training run's marker says (rectune.training.stages)
START, END = "<!-- rectune:evaluation -->", "<!-- /rectune:evaluation -->"
SHOWN_METRICS = 6  # the card shows the report's first metrics; report.json has them all


def _row(report: dict, data: str, report_dir: str) -> dict:
    benchmark = get_benchmark(report.get("benchmark"))
    k = report.get("k")
    metrics = {}
    for name in report.get("metrics", [])[:SHOWN_METRICS]:
        spec = benchmark.metrics.get(name)
        label = spec.label.replace("@K", f"@{k}") if spec and k else (spec.label if spec else name)
        value = report["overall"].get(name)
        metrics[label] = None if value is None else round(float(value), 4)
    return {
        "data": data,
        "convention": report.get("convention", "default").split(":")[0],
        "n": report["overall"].get("n"),
        "selection": selection_text((report.get("config") or {}).get("selection")),
        "metrics": metrics,
        "report": report_dir,
        "commit": (report.get("config") or {}).get("git_commit"),
    }


def _is_row(value: object) -> bool:
    return isinstance(value, dict) and isinstance(value.get("metrics"), dict) and {"data", "n"} <= value.keys()


def results_section(rows: list[dict]) -> str:
    """The card's Evaluation section for ``rows`` (one table per set of metric labels)."""
    lines = [START, "## Evaluation", "", "Scored with `evaluate/run.py` (`report.json` in each report folder):", ""]
    for labels in dict.fromkeys(tuple(row["metrics"]) for row in rows):
        lines += ["| data | metrics | n | " + " | ".join(labels) + " | report | commit |",
                  "|---|---|---|" + "---|" * len(labels) + "---|---|"]  # fmt: skip
        for row in (r for r in rows if tuple(r["metrics"]) == labels):
            values = " | ".join("-" if v is None else f"{v:.3f}" for v in row["metrics"].values())
            where = f"{markdown_cell(row['report'])} | {markdown_cell((row['commit'] or '-')[:7])}"
            data, convention = markdown_cell(row["data"]), markdown_cell(row["convention"])
            chosen = f" ({markdown_cell(row['selection'])})" if row.get("selection") else ""
            lines.append(f"| {data} | {convention} | {row['n']}{chosen} | {values} | {where} |")
        lines.append("")
    return "\n".join([*lines, END]) + "\n"


def record_results(checkpoint_dir: str | os.PathLike, report: dict, data: str, report_dir: str) -> str:
    """Add ``report``'s overall results to the checkpoint's card; returns what it did, in one line."""
    folder = Path(checkpoint_dir)
    marker = read_marker(folder)
    card = folder / CARD
    if marker is None or marker.get("kind") != TRAINING_KIND or CARD not in (marker.get("files") or {}):
        return f"model card: {folder} is not a finished RecTune training folder; its card is left as it is"
    if card.is_symlink() or not card.is_file():
        return f"model card: {card} is missing or not a plain file; it is left as it is"
    if changed_files(folder, marker):
        return f"model card: files in {folder} changed since RecTune wrote them; its card is left as it is"
    try:
        lock_output(folder)
    except RecTuneError:
        return f"model card: another process holds {folder}; its card is left as it is"
    results = folder / RESULTS
    stored = read_json(results) if results.is_file() and not results.is_symlink() else {}
    if results.is_symlink() or not (isinstance(stored, dict) and all(_is_row(v) for v in stored.values())):
        return f"model card: {results} is not the results RecTune keeps there; the card is left as it is"
    row = _row(report, data, report_dir)
    stored[f"{data} {row['convention']} {row['n']}"] = row  # a rescore replaces its row; a subset has its own
    text = card.read_text(encoding="utf-8")
    if START in text and END in text:
        text = text[: text.index(START)] + text[text.index(END) + len(END) :].lstrip("\n")
    write_json(folder / RESULTS, stored)
    with atomic_write(card) as handle:
        handle.write(text.rstrip("\n") + "\n\n" + results_section(list(stored.values())))
    hashed = [name for name in marker.get("files", {}) if "/" not in name]
    write_marker(folder, TRAINING_KIND, [*marker.get("entries", []), RESULTS], hashed=[*hashed, RESULTS])
    return f"model card: {card} lists this score"
