"""An evaluation's W&B run: named after the stage it scores, grouped by data set, with the per-task
metrics in its summary and one table row per query."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from rectune.core.io import RecTuneError, fault_point, read_json, write_json
from rectune.core.outputs import disk_full
from rectune.core.secrets import argv_redacted
from rectune.core.wandb_mode import init_run, offline_unless_logged_in, quiet_settings, where_logged


def eval_run_name(config: dict) -> str:
    """``<run>-<stage>-<data>`` for a trained stage, else ``<checkpoint>-<data>``."""
    data = Path(config["data"]).parent.name or Path(config["data"]).stem
    trained = config.get("trained_by") or {}
    if trained.get("recipe") and trained.get("stage"):
        return f"{trained['recipe']}-{trained['stage']}-{data}"
    if config.get("kind") == "openai":
        return f"{config['base_model']}-{data}"
    return f"{Path(config['checkpoint'].removeprefix('embedded:')).name}-{data}"


LOGGED = "wandb_logged.json"  # the scores the folder's last W&B run shows, written once that run has finished


def logged_scores(out: str | os.PathLike) -> str | None:
    """The digest (:func:`scores_digest`) of the scores the last W&B run logged from report folder ``out`` shows;
    None when no run finished there. A run cut short (a full disk, a crash, Ctrl-C) leaves no record, so the
    next evaluation logs its scores again: the folder's ``wandb/`` alone had counted as logged."""
    try:
        record = read_json(Path(out) / LOGGED)
    except (RecTuneError, OSError):
        return None
    digest = record.get("scores_sha256") if isinstance(record, dict) else None
    return digest if isinstance(digest, str) else None


def scores_digest(report: dict) -> str:
    """SHA-256 of what a W&B run of ``report`` shows (:func:`scores_of`)."""
    return hashlib.sha256(json.dumps(scores_of(report), sort_keys=True, default=str).encode()).hexdigest()


def scores_of(report: dict) -> dict:
    """What a W&B run of ``report`` shows: the predictions it scored and every summary."""
    config = report.get("config") if isinstance(report.get("config"), dict) else {}
    shown = ("benchmark", "metrics", "convention", "overall", "by_task", "baseline", "endpoint")
    return {"predictions_key": config.get("predictions_key"), **{key: report.get(key) for key in shown}}


def log_to_wandb(out: str | os.PathLike, report: dict, table_rows: list[dict], project: str) -> None:
    """Per-task metrics in the run summary, the config, and a per-query table; grouped by data set. Recorded in
    ``out``'s :data:`LOGGED` once the run has finished."""
    config = report["config"]
    baseline = report.get("baseline")
    tags = ["eval"]
    if baseline:  # baselines sit in the same group as the checkpoints, tagged so a panel can pick them out
        config = {**config, "baseline": baseline}
        tags += ["baseline", *(["ceiling"] if baseline.get("ceiling") else [])]
    offline_unless_logged_in()
    (Path(out) / LOGGED).unlink(missing_ok=True)  # the scores change, or an earlier run never finished
    with argv_redacted():  # W&B records the command line: no key from a --base-url in it
        run = init_run(
            project=project,
            name=eval_run_name(config),
            job_type="eval",
            group=f"eval-{Path(config['data']).parent.name}",
            config=config,
            tags=tags,
            dir=str(out),
            settings=quiet_settings(),
        )
    fault_point("wandb:started")
    try:
        _log_scores(run, report, table_rows)
    except BaseException as err:
        with contextlib.suppress(Exception):  # W&B's own threads wound down before the error ends the process
            run.finish(exit_code=1)
        if disk_full(err):
            raise RecTuneError(
                f"{out}: no space left on the device for W&B's run ({err}); the report is written: free some and "
                "rerun to log it"
            ) from None
        raise
    write_json(Path(out) / LOGGED, {"scores_sha256": scores_digest(report), "run_id": run.id, "project": project})
    print(where_logged(run))


def _log_scores(run: Any, report: dict, table_rows: list[dict]) -> None:
    import wandb

    for name, value in (report.get("endpoint") or {}).items():
        if isinstance(value, (int, float)):
            run.summary[f"endpoint/{name}"] = value
    for task, summary in [*report["by_task"].items(), ("overall", report["overall"])]:
        for metric in report["metrics"]:
            if summary.get(metric) is not None:
                run.summary[f"{task}/{metric}"] = summary[metric]
        run.summary[f"{task}/n"] = summary["n"]
    columns = list(table_rows[0]) if table_rows else []
    data = [[r[c] for c in columns] for r in table_rows]
    if len(data) <= wandb.Table.MAX_ROWS:
        run.log({"per_query": wandb.Table(columns=columns, data=data)})
    else:  # a logged table keeps its first 10,000 rows (LLMRec's test set has a row per user and task)
        run.summary["per_query/nrows"] = len(data)
        artifact = per_query_artifact(wandb, run.id, columns, data)
        run.log_artifact(artifact)
        print(
            f"W&B: the per-query table ({len(data):,} rows, past the {wandb.Table.MAX_ROWS:,} a logged table keeps) "
            f"is the run's artifact {artifact.name}"
        )
    run.finish()


def per_query_artifact(wandb: Any, run_id: str, columns: list[str], data: list[list]) -> Any:
    """An artifact holding every row of the per-query table: tables ``per_query`` (then ``per_query-2``, ...) of
    at most ``wandb.Table.MAX_ARTIFACT_ROWS`` rows each, the most an artifact's table keeps."""
    # a run id set through WANDB_RUN_ID may hold characters W&B takes there but refuses in an artifact's name
    artifact = wandb.Artifact(f"per_query-{re.sub(r'[^A-Za-z0-9_.-]', '_', run_id)}", type="per_query")
    size = wandb.Table.MAX_ARTIFACT_ROWS
    for part, start in enumerate(range(0, len(data), size), start=1):
        name = "per_query" if part == 1 else f"per_query-{part}"
        artifact.add(wandb.Table(columns=columns, data=data[start : start + size]), name)
    return artifact
