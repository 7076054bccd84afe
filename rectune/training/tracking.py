"""W&B tracking of a training stage: run name, config (stage, recipe, model, data, commit), resume."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from rectune.core.io import write_json
from rectune.core.provenance import git_commit
from rectune.core.secrets import argv_redacted
from rectune.core.wandb_mode import TAG_CHARACTERS, init_run, offline_unless_logged_in, quiet_settings, where_logged
from rectune.models.checkpoints import WANDB_RUN, wandb_run_record
from rectune.training.arguments import RunArguments

log = logging.getLogger(__name__)


def run_metadata(stage: str, run_args: RunArguments, base_model: str, files: list[Path], **extra: Any) -> dict:
    return {
        "stage": stage,
        "recipe": run_args.recipe_name,
        "base_model": base_model,
        "data": [str(f) for f in files],
        "git_commit": git_commit(),
        **extra,
    }


def init_tracking(training_args: Any, run_args: RunArguments, metadata: dict) -> None:
    """Name the run ``<recipe>-<stage>`` (unless the recipe names it: ``run_name``) and put stage, recipe, model,
    data and commit into its config.

    The W&B run is opened here (main process only) so the Trainer's W&B callback reuses it; a stage
    that was interrupted resumes the W&B run it opened (its id is kept in ``wandb_run.json``).
    """
    training_args.run_name = training_args.run_name or f"{run_args.recipe_name}-{metadata['stage']}"
    if "wandb" not in (training_args.report_to or []):
        return
    from accelerate import PartialState

    if not PartialState().is_main_process:
        return

    offline_unless_logged_in()
    os.environ.setdefault("WANDB_PROJECT", run_args.wandb_project)
    out = Path(training_args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    earlier = wandb_run_record(out)
    # the recipe's name tags the run where it fits W&B's limit on tags (a longer one was a traceback; the group
    # holds it whole)
    recipe_tag = [run_args.recipe_name] if len(run_args.recipe_name) <= TAG_CHARACTERS else []
    with argv_redacted():  # W&B records the command line
        run = init_run(
            project=run_args.wandb_project,
            name=training_args.run_name,
            group=run_args.recipe_name,
            job_type=metadata["stage"],
            tags=[metadata["stage"], *recipe_tag, *run_args.wandb_tags],
            config={"rectune": metadata},
            dir=str(out.resolve().parent),  # W&B writes its wandb/ there: beside the stage, out of a Hub push
            id=earlier.get("id"),
            resume="allow" if earlier.get("id") else None,
            settings=quiet_settings(),
        )
    log.info(where_logged(run))
    write_json(out / WANDB_RUN, {"id": run.id, "project": run.project, "url": run.url})
