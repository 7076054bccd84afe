"""A run that pushes its stage to the Hub (``push_to_hub``): the repository made before the model loads, and an
upload that fails as the run ends said in one line once the stage is saved and marked finished here.

transformers' Trainer makes the repository once the model has loaded, so no login, a login that may not write
there, ``HF_HUB_OFFLINE`` or no network was a traceback then; and it uploads the saved stage inside
``save_model``, so a network that dropped at the end of a long run was a traceback in place of the stage's
``finished.json``, and a rerun trained nothing but uploaded again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rectune.core.escaping import shell_word
from rectune.core.io import RecTuneError
from rectune.models.checkpoints import finished_stage
from rectune.models.hub import bound_hub_requests, check_hub_repo


def hub_repo(training_args: Any) -> str:
    """The repository the Trainer pushes to: ``hub_model_id``, else the output folder's name."""
    return training_args.hub_model_id or Path(training_args.output_dir).absolute().name


def check_hub_upload(training_args: Any) -> None:
    """Make the run's Hub repository now, on the main process, as the Trainer would later; else one line. A stage
    already finished is not trained or uploaded again (``already_finished`` says so), so it is left alone."""
    if not training_args.push_to_hub or int(os.environ.get("RANK", "0")) != 0:
        return  # the Trainer makes the repository on the main process alone
    if finished_stage(training_args.output_dir) is None:
        check_hub_repo(hub_repo(training_args), training_args.hub_token, training_args.hub_private_repo)
        bound_hub_requests()  # the uploads that follow, as checkpoints are saved and as the stage ends


@contextmanager
def keeping_upload_failures(trainer: Any) -> Iterator[list[str]]:
    """Within, ``trainer.push_to_hub`` (``save_model`` calls it) records why an upload failed where it raised;
    the stage is saved here before the upload begins, so the failure does not undo it."""
    failures: list[str] = []
    push = getattr(trainer, "push_to_hub", None)
    if push is None:  # a trainer that never uploads
        yield failures
        return

    def push_or_record(*args: Any, **kwargs: Any) -> Any:
        try:
            return push(*args, **kwargs)
        except RecTuneError:  # the stage's own files (its card is written as the push begins): not an upload's
            raise
        except Exception as err:  # no network, the Hub's refusal: whatever the HTTP stack raises
            failures.append(" ".join(str(err).split())[:200] or type(err).__name__)
            return None

    trainer.push_to_hub = push_or_record
    try:
        yield failures
    finally:
        del trainer.push_to_hub  # the class's method again


def upload_failed_text(trainer: Any, reason: str) -> str:
    out, repo = trainer.args.output_dir, getattr(trainer, "hub_model_id", None) or hub_repo(trainer.args)
    return (
        f"{out}: saved and finished here, but its upload to the Hub failed ({reason}); upload it with "
        f"`hf upload {shell_word(repo)} {shell_word(out)} --exclude 'checkpoint-*' --exclude 'merged/*'`"
    )
