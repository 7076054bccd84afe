"""An evaluation's W&B run: named after the stage it scores, grouped by data set, with the per-task
metrics in its summary and one table row per query."""

from __future__ import annotations

import os
from pathlib import Path

from rectune.core.io import RecTuneError, read_json
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


def logged_scores(out: str | os.PathLike) -> dict | None:
    """The scores of a report folder whose last evaluation was logged to W&B (``out/wandb`` holds its
    run), read before this evaluation rewrites them; None when there is none."""
    out = Path(out)
    if not (out / "wandb").is_dir() or not (out / "report.json").is_file():
        return None
    try:
        report = read_json(out / "report.json")
    except (RecTuneError, OSError):
        return None
    return scores_of(report) if isinstance(report, dict) else None  # another shape: no scores to match


def scores_of(report: dict) -> dict:
    """What a W&B run of ``report`` shows: the predictions it scored and every summary."""
    config = report.get("config") if isinstance(report.get("config"), dict) else {}
    shown = ("benchmark", "metrics", "convention", "overall", "by_task", "baseline", "endpoint")
    return {"predictions_key": config.get("predictions_key"), **{key: report.get(key) for key in shown}}


def log_to_wandb(out: str | os.PathLike, report: dict, table_rows: list[dict], project: str) -> None:
    """Per-task metrics in the run summary, the config, and a per-query table; grouped by data set."""
    import wandb

    config = report["config"]
    baseline = report.get("baseline")
    tags = ["eval"]
    if baseline:  # baselines sit in the same group as the checkpoints, tagged so a panel can pick them out
        config = {**config, "baseline": baseline}
        tags += ["baseline", *(["ceiling"] if baseline.get("ceiling") else [])]
    offline_unless_logged_in()
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
    for name, value in (report.get("endpoint") or {}).items():
        if isinstance(value, (int, float)):
            run.summary[f"endpoint/{name}"] = value
    for task, summary in [*report["by_task"].items(), ("overall", report["overall"])]:
        for metric in report["metrics"]:
            if summary.get(metric) is not None:
                run.summary[f"{task}/{metric}"] = summary[metric]
        run.summary[f"{task}/n"] = summary["n"]
    columns = list(table_rows[0]) if table_rows else []
    table = wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in table_rows])
    run.log({"per_query": table})
    run.finish()
    print(where_logged(run))
