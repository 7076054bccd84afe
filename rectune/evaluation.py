"""Generate with a checkpoint on held-out rows, resumably, then score and report.

Outputs in the report folder:

* ``predictions.jsonl`` — ``{"id", "completion"}`` rows, appended and flushed batch by batch;
  a rerun skips the ids already there (a line cut by an interruption is dropped and redone);
* ``report.json`` — the scorer's report plus the run's configuration;
* ``report.md`` — the per-task table;
* ``config.json`` — checkpoint, base model, data, prompt variant, generation settings, commit.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path

from rectune.benchmarks import Resources, get_benchmark
from rectune.checkpoints import Checkpoint
from rectune.generation import GenerationSettings
from rectune.io import DataError, atomic_write, read_json, write_json
from rectune.schema import load_rows
from rectune.scoring import score_benchmark

log = logging.getLogger(__name__)


def prompt_variant(data: str | os.PathLike, with_history: bool | None, k: int | None) -> dict:
    """The prompt settings: as given, else as data_prep recorded them for the training files."""
    recorded = {}
    stats = Path(data).parent / "stats.json"
    if stats.is_file():
        recorded = read_json(stats).get("prompt", {})
    return {
        "with_history": recorded.get("with_history", False) if with_history is None else with_history,
        "k": recorded.get("k") if k is None else k,
    }


def read_finished(path: Path, known_ids: set[str]) -> dict[str, str]:
    """Predictions already written; a trailing partial line (interrupted write) is dropped from the file."""
    if not path.is_file():
        return {}
    finished: dict[str, str] = {}
    good_bytes = 0
    with path.open("rb") as handle:
        for raw in handle:
            if not raw.endswith(b"\n"):
                break  # every row is written with its newline: a row without one was cut by an interruption
            try:
                row = json.loads(raw)
            except json.JSONDecodeError:
                break
            if (
                not isinstance(row, dict)
                or row.get("id") not in known_ids
                or not isinstance(row.get("completion"), str)
            ):
                raise DataError(path, f"unexpected row {raw[:80]!r}: not a prediction for this data (write elsewhere)")
            finished[row["id"]] = row["completion"]
            good_bytes += len(raw)
    if good_bytes < path.stat().st_size:
        log.warning("%s: dropping a partial last line left by an interrupted run", path)
        with path.open("r+b") as handle:
            handle.truncate(good_bytes)
    return finished


def run_generation(rows: list, predictions_path: Path, generate_batches, variant: dict) -> dict[str, str]:
    """Generate what is missing, appending each batch to ``predictions_path`` as it finishes."""
    finished = read_finished(predictions_path, {r.id for r in rows})
    todo = [r for r in rows if r.id not in finished]
    if finished:
        log.info("resuming: %d of %d queries already done", len(finished), len(rows))
    if not todo:
        return finished
    benchmark = get_benchmark(todo[0].benchmark)
    prompts = [benchmark.messages(r, variant) for r in todo]
    predictions_path.parent.mkdir(parents=True, exist_ok=True)
    with predictions_path.open("a", encoding="utf-8") as handle:
        for batch in generate_batches(prompts):
            for index, completion in batch:
                row_id = todo[index].id
                finished[row_id] = completion
                handle.write(json.dumps({"id": row_id, "completion": completion}, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    return finished


def evaluate_checkpoint(
    checkpoint: Checkpoint,
    data: str | os.PathLike,
    out: str | os.PathLike,
    generate_batches,
    variant: dict,
    settings: GenerationSettings,
    *,
    catalog: str | None = None,
    kg: str | None = None,
    limit: int | None = None,
    commit: str = "unknown",
) -> tuple[dict, list[dict]]:
    out = Path(out)
    rows = load_rows(data)
    if limit is not None:
        rows = rows[:limit]
    config = {
        **checkpoint.describe(),
        "data": str(data),
        "queries": len(rows),
        "prompt": variant,
        "generation": asdict(settings),
        "git_commit": commit,
    }
    write_json(out / "config.json", config)
    predictions = run_generation(rows, out / "predictions.jsonl", generate_batches, variant)
    report, table = score_benchmark(rows, predictions, Resources(data, catalog, kg))
    report["config"] = config
    write_json(out / "report.json", report, line_per_item=("per_query",))
    with atomic_write(out / "report.md") as handle:
        handle.write(f"# {out.name}\n\ncheckpoint `{checkpoint.path}` on `{data}` ({len(rows)} queries)\n\n")
        handle.write(report["table"] + "\n")
    return report, table


def log_to_wandb(out: str | os.PathLike, report: dict, table_rows: list[dict], project: str) -> None:
    """Per-task metrics in the run summary, the config, and a per-query table; grouped by data set."""
    import wandb

    config = report["config"]
    run = wandb.init(
        project=project,
        name=Path(out).name,
        job_type="eval",
        group=f"eval-{Path(config['data']).parent.name}",
        config=config,
        tags=["eval"],
        dir=str(out),
    )
    for task, summary in [*report["by_task"].items(), ("overall", report["overall"])]:
        for metric in report["metrics"]:
            if summary.get(metric) is not None:
                run.summary[f"{task}/{metric}"] = summary[metric]
        run.summary[f"{task}/n"] = summary["n"]
    columns = list(table_rows[0]) if table_rows else []
    table = wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in table_rows])
    run.log({"per_query": table})
    run.finish()
