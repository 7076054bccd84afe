"""Where a training stage stands: the checkpoint to resume from, and whether the stage has finished.

A checkpoint counts once fully written (the Trainer writes ``trainer_state.json`` last); a stage
counts as finished once ``finished.json`` is written, after its adapter and run files. A finished
stage is final: rerunning it does nothing, so ``make`` dependencies never train it further.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from rectune.core.io import fault_point, write_json
from rectune.core.outputs import MARKER, claim_output, read_marker, write_marker
from rectune.models.checkpoints import FINISHED, finished_stage

log = logging.getLogger(__name__)


TRAINING_KIND = "training run"


def own_output_dir(output_dir: str | os.PathLike, *, overwrite: bool = False) -> int:
    """Claim ``output_dir`` for the whole run (main process) and return when, in ``time.time_ns()``.

    It must be new, empty or a RecTune training folder (its marker), so a run never writes into (or
    changes the modes of) a folder of the user's; ``overwrite`` trains into any folder. A second run into
    it stops at once, instead of both writing checkpoints that a resume would then mix.
    """
    claimed_at = time.time_ns()
    if int(os.environ.get("RANK", "0")) == 0:
        folder = claim_output(output_dir, TRAINING_KIND, overwrite=overwrite)
        if read_marker(folder) is None:
            folder.mkdir(parents=True, exist_ok=True)
            write_marker(folder, TRAINING_KIND, [], hashed=[])
    return claimed_at


def seal_output_dir(output_dir: str | os.PathLike) -> None:
    """Record the stage's files (top level: adapter, card, recipe) so a rerun refuses edited ones."""
    folder = Path(output_dir)
    entries = [entry.name for entry in folder.iterdir() if entry.name != MARKER]
    files = [name for name in entries if (folder / name).is_file() and not (folder / name).is_symlink()]
    write_marker(folder, TRAINING_KIND, entries, hashed=files)


def last_checkpoint(training_args: Any) -> str | None:
    """The checkpoint to resume from: the one asked for, else the newest complete one in the output dir.

    A checkpoint counts once fully written: the Trainer writes ``trainer_state.json`` last, so one
    without it (or with a cut one) was interrupted while saving, and is skipped with a warning.
    """
    if training_args.resume_from_checkpoint:
        return training_args.resume_from_checkpoint
    output_dir = Path(training_args.output_dir)
    found = [p for p in output_dir.glob("checkpoint-*") if p.is_dir() and _step(p).isdigit()]
    for checkpoint in sorted(found, key=lambda p: int(_step(p)), reverse=True):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            log.info("resuming from %s", checkpoint)
            return str(checkpoint)
        log.warning("skipping %s: %s (interrupted while saving)", checkpoint, problem)
    return None


def train(trainer: Any, checkpoint: str | None) -> None:
    """Train from ``checkpoint`` (or from the start) up to the stage's last step, and no further.

    A run killed while saving its final result left a checkpoint that already holds the last step;
    transformers would resume from it and train one step more, so its weights are loaded instead.
    """
    if checkpoint is not None and _holds_the_last_step(trainer.args, Path(checkpoint)):
        from transformers import TrainerState

        log.info("%s holds the last step: loading it, nothing left to train", checkpoint)
        trainer._load_from_checkpoint(checkpoint)
        trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
        return
    trainer.train(resume_from_checkpoint=checkpoint)


def _holds_the_last_step(training_args: Any, checkpoint: Path) -> bool:
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    last = training_args.max_steps if training_args.max_steps > 0 else state.get("max_steps", 0)
    return 0 < last <= state["global_step"]


def _step(checkpoint: Path) -> str:
    return checkpoint.name.removeprefix("checkpoint-")


_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin", "model.safetensors", "pytorch_model.bin")


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or None when it is complete."""
    state_path = checkpoint / "trainer_state.json"
    if not state_path.is_file():
        return "no trainer_state.json"
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "trainer_state.json is cut short"
    if not isinstance(state, dict) or str(state.get("global_step")) != _step(checkpoint):
        return "trainer_state.json does not match the folder's step"
    has_weights = any((checkpoint / name).is_file() for name in _WEIGHTS)
    if not has_weights and not any(checkpoint.glob("global_step*")) and not any(checkpoint.glob("*.index.json")):
        return "no model weights"
    return None


def fault_callbacks() -> list:
    """Test hook: with ``RECTUNE_FAULT=saved:checkpoint-N`` the run kills itself once checkpoint N is saved."""
    if not os.environ.get("RECTUNE_FAULT", "").startswith("saved:"):
        return []
    from transformers import TrainerCallback

    class KillAfterSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            fault_point(f"saved:checkpoint-{state.global_step}")

    return [KillAfterSave()]


def mark_finished(output_dir: str | os.PathLike, trainer: Any, metadata: dict) -> None:
    write_json(Path(output_dir) / FINISHED, {**metadata, "global_step": trainer.state.global_step})


def already_finished(output_dir: str | os.PathLike) -> bool:
    """True (and says so) when the stage in ``output_dir`` has finished: a rerun must not train it further."""
    done = finished_stage(output_dir)
    if done is None:
        return False
    print(
        f"{output_dir}: the {done.get('stage', 'training')} stage finished at step {done.get('global_step')}; "
        "nothing to do (to train again, give another output_dir or remove this one)"
    )
    return True
