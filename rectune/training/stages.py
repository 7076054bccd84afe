"""Where a training stage stands: the checkpoint to resume from, and whether the stage has finished.

A checkpoint counts once fully written (the Trainer writes ``trainer_state.json`` last); a stage
counts as finished once ``finished.json`` is written, after its adapter and run files. A finished
stage is final: rerunning it does nothing, so ``make`` dependencies never train it further.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rectune.core.file_modes import make_shareable, private_files
from rectune.core.io import RecTuneError, fault_point, read_json, write_json
from rectune.core.kept_inputs import refuse_outputs_over_inputs
from rectune.core.outputs import MARKER, claim_output, disk_full, read_marker, sha256_of, write_marker
from rectune.models.checkpoints import FINISHED, finished_stage
from rectune.models.fingerprints import adapter_fingerprint, model_record
from rectune.models.hub import local_model_folder
from rectune.models.sharing import make_portable
from rectune.models.template_options import TEMPLATE_OPTIONS_FILE
from rectune.training.resumable import check_pickled_states, checkpoint_problem, checkpoint_step, states_read_as_data
from rectune.training.sft_base import MERGED_SFT_BASE, drop_merged_model

log = logging.getLogger(__name__)


TRAINING_KIND = "training run"


def own_output_dir(output_dir: str | os.PathLike, *, overwrite: bool = False, reads: list = ()) -> None:
    """Claim ``output_dir`` for the whole run (main process).

    It must be new, empty or a RecTune training folder (its marker), so a run never writes into a folder of the
    user's; ``overwrite`` trains into any folder but one that is or holds an input it ``reads`` (``(flag, path)``).
    A second run into it stops at once, instead of both writing checkpoints that a resume would then mix.
    """
    refuse_outputs_over_inputs([("output_dir", output_dir)], reads)
    if int(os.environ.get("RANK", "0")) == 0:
        folder = claim_output(output_dir, TRAINING_KIND, overwrite=overwrite)
        if read_marker(folder) is None:
            made = [path for path in (folder, *folder.parents) if not path.exists()]  # deepest first
            folder.mkdir(parents=True, exist_ok=True)
            write_marker(folder, TRAINING_KIND, [], hashed=[])
            atexit.register(_release_unused, folder, made)


def _release_unused(folder: Path, made: list[Path]) -> None:
    """At exit, a folder this run claimed that still holds only its own records and merged SFT base (it stopped
    before training wrote anything: a bad row, a template, Ctrl-C) is left as it was found, so a failed run
    leaves no output behind."""
    try:
        names = {entry.name for entry in folder.iterdir()}
        if not names <= {MARKER, STARTED, MERGED_SFT_BASE}:
            return
        if MERGED_SFT_BASE in names and not drop_merged_model(folder / MERGED_SFT_BASE):  # built before it stopped
            return
        for name in names - {MERGED_SFT_BASE}:
            (folder / name).unlink()
        for path in made:  # the folders mkdir made, deepest first; one something else has filled since stays
            path.rmdir()
    except OSError:
        return  # removed or filled meanwhile: what is there stays


def seal_output_dir(output_dir: str | os.PathLike) -> None:
    """Record the stage's files (top level: adapter, card, recipe) so a rerun refuses edited ones."""
    folder = Path(output_dir)
    entries = [entry.name for entry in folder.iterdir() if entry.name != MARKER]
    files = [name for name in entries if (folder / name).is_file() and not (folder / name).is_symlink()]
    write_marker(folder, TRAINING_KIND, entries, hashed=files)


STARTED = "started.json"  # the recipe and data a run started with, kept for the resumes that follow
# settings that change what a run reports, where it logs or how fast it samples, not what it trains: they
# may differ on resume (a static cache and a compiled decoding step draw from the same distribution)
RESUME_MAY_CHANGE = {
    "output_dir", "report_to", "logging_steps", "wandb_project", "wandb_tags", "recipe_name", "push_to_hub",
    "hub_model_id", "hub_strategy", "hub_private_repo", "resume_from_checkpoint", "profile_steps", "compile_rollouts",
}  # fmt: skip


def check_resume(
    output_dir: str | os.PathLike,
    recipe: dict,
    data: list[Path],
    *,
    overwrite: bool,
    sft_adapter: str | None = None,
    reward_files: list[Path] | None = None,
    base_model: str | None = None,
) -> None:
    """Refuse, in one line naming the first differing key, to resume a run with another recipe or data.

    The first start records ``recipe`` (the resolved recipe), the data files' SHA-256 and, for GRPO, those of
    the files its rewards read (``reward_files``: catalog and KG) and of the SFT adapter SFT then RFT merges
    in (``sft_adapter``), and the base model's files where they are local (``base_model``: a folder, or a Hub id's
    cached snapshot), each of which may be rewritten at the same path, in ``started.json``; a later run into
    the same folder that would resume a checkpoint must match them (``overwrite``: it may differ, and the
    record becomes the new one), so one folder never mixes two runs.
    """
    if int(os.environ.get("RANK", "0")) != 0:
        return
    folder = Path(output_dir)
    now = {"recipe": {k: v for k, v in recipe.items() if k not in RESUME_MAY_CHANGE}, "data": _fingerprints(data)}
    if reward_files is not None:
        now["reward_files"] = _fingerprints(reward_files)
    if sft_adapter:
        now["sft_adapter"] = adapter_fingerprint(sft_adapter)
    record = folder / STARTED
    resuming = any(checkpoint_problem(p) is None for p in folder.glob("checkpoint-*") if p.is_dir())
    earlier = read_json(record) if resuming and record.is_file() else None
    model_folder = local_model_folder(base_model) if base_model else None
    if model_folder is not None:
        now["base_model"] = model_record(model_folder, earlier.get("base_model") if isinstance(earlier, dict) else None)
    if resuming and record.is_file():
        difference = _first_difference(earlier, now)
        if difference and not overwrite:
            raise RecTuneError(
                f"{folder}: its checkpoints were trained with another {difference}; resume with the recipe and "
                "data it started with, give another output_dir, or pass --overwrite to continue with these"
            )
        if difference:
            log.warning("%s: resuming with another %s (--overwrite)", folder, difference)
    if not resuming or overwrite or not record.is_file():
        write_json(record, now)


def _fingerprints(files: list[Path]) -> list[str]:
    """``NAME SHA-256`` of each training file (of the rows a view derives from): the content and the view,
    not how the path was spelled."""
    from rectune.training.views import view_source

    found = []
    for path in map(Path, files):
        source = view_source(path)
        actual = source[0] if source else path
        found.append(f"{path.name} {sha256_of(actual) if actual.is_file() else 'missing'}")
    return sorted(found)


def _first_difference(earlier: Any, now: dict) -> str | None:
    """``recipe key 'learning_rate' (3e-4, now 1e-3)``, ``training data``, or None when they match."""
    if not isinstance(earlier, dict):
        return f"recipe ({STARTED} is unreadable)"
    recipe, was = now["recipe"], earlier.get("recipe") or {}
    for key in sorted(set(recipe) | set(was)):
        if recipe.get(key) != was.get(key):
            return f"recipe key {key!r} ({was.get(key, 'unset')!r}, now {recipe.get(key, 'unset')!r})"
    if now["data"] != earlier.get("data"):
        return "training data (a file's content or the files named)"
    # records from before these were kept lack them: nothing to compare
    if "reward_files" in earlier and now.get("reward_files") != earlier["reward_files"]:
        return "catalog or KG for the rewards (a file's content or the files named)"
    if "sft_adapter" in earlier and now.get("sft_adapter") != earlier["sft_adapter"]:
        return "SFT adapter (init_adapter was retrained or replaced since)"
    base, was = now.get("base_model"), earlier.get("base_model")
    if isinstance(was, dict) and (base or {}).get("sha256") != was.get("sha256"):
        return "base model (its files were rewritten since, or are no longer here)"
    return None


def last_checkpoint(training_args: Any) -> str | None:
    """The checkpoint to resume from: the one asked for, else the newest complete one in the output dir.

    A checkpoint counts once fully written: the Trainer writes ``trainer_state.json`` last, so one
    without it (or with a cut one) was interrupted while saving, and is skipped with a warning.
    """
    if training_args.resume_from_checkpoint:
        return training_args.resume_from_checkpoint
    output_dir = Path(training_args.output_dir)
    found = [p for p in output_dir.glob("checkpoint-*") if p.is_dir() and checkpoint_step(p).isdigit()]
    for checkpoint in sorted(found, key=lambda p: int(checkpoint_step(p)), reverse=True):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            check_pickled_states(checkpoint)  # a copied run folder's DeepSpeed states: data, or one line
            log.info("resuming from %s", checkpoint)
            return str(checkpoint)
        log.warning("skipping %s: %s (interrupted while saving)", checkpoint, problem)
    return None


def train(trainer: Any, checkpoint: str | None) -> None:
    """Train from ``checkpoint`` (or from the start) up to the stage's last step, and no further.

    A run killed while saving its final result left a checkpoint that already holds the last step;
    transformers would resume from it and train one step more, so its weights are loaded instead. A SIGTERM
    saves the step under way and exits with status 143 (:mod:`rectune.training.sigterm_checkpoint`).
    """
    with states_read_as_data():  # DeepSpeed's resume unpickles its states: weights only, whatever it asks
        if checkpoint is not None and _holds_the_last_step(trainer.args, Path(checkpoint)):
            from transformers import TrainerState

            log.info("%s holds the last step: loading it, nothing left to train", checkpoint)
            trainer._load_from_checkpoint(checkpoint)
            trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
            return
        from rectune.training.sigterm_checkpoint import checkpoint_on_sigterm, stopped_text

        sigterm = checkpoint_on_sigterm(trainer)  # a scheduler's SIGTERM: the step under way saved, then a stop
        try:
            with full_disk_said(trainer.args.output_dir, "a checkpoint"):
                trainer.train(resume_from_checkpoint=checkpoint)
        finally:
            sigterm.restore()
    if sigterm.stopped_at is not None:  # not finished: the rerun resumes from that checkpoint
        trainer.accelerator.print(stopped_text(trainer.args.output_dir, sigterm.stopped_at, trainer.state.max_steps))
        raise SystemExit(128 + signal.SIGTERM)


@contextlib.contextmanager
def full_disk_said(output_dir: str | os.PathLike, saving: str) -> Iterator[None]:
    """A disk that fills while the run saves ``saving`` into ``output_dir`` as one line, however the writer
    reports it (safetensors, tokenizers and torch.save each in their own error): the rerun resumes."""
    try:
        yield
    except Exception as err:
        if disk_full(err, output_dir):
            raise RecTuneError(
                f"{output_dir}: no space left on the device while saving {saving}; free some and rerun: it resumes "
                "from the last complete checkpoint"
            ) from None
        raise


def _holds_the_last_step(training_args: Any, checkpoint: Path) -> bool:
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    last = training_args.max_steps if training_args.max_steps > 0 else state.get("max_steps", 0)
    return 0 < last <= state["global_step"]


def fault_callbacks() -> list:
    """Test hook: with ``RECTUNE_FAULT=saved:checkpoint-N`` the run kills itself once checkpoint N is saved."""
    if not os.environ.get("RECTUNE_FAULT", "").startswith("saved:"):
        return []
    from transformers import TrainerCallback

    class KillAfterSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            fault_point(f"saved:checkpoint-{state.global_step}")

    return [KillAfterSave()]


def checkpoints_like_the_stage(training_args: Any, base_model: str, sft_adapter: str | None = None) -> list:
    """Each checkpoint made readable to others as it is saved (a run killed later left its weights private), and
    to load on its own as the stage's end makes its adapter: its base recorded by a portable name and, for SFT
    then RFT, the SFT adapter it builds on (``base_chain.json``: the merged SFT base a checkpoint names is removed
    as the stage ends, and evaluating ``checkpoint-N`` then failed on a missing base); GRPO's chat template
    variables beside it (evaluating it rendered its prompts without them: Qwen3's ``enable_thinking: false``
    trained on, thinking evaluated)."""
    from transformers import TrainerCallback

    options = getattr(training_args, "chat_template_kwargs", None)

    class LikeTheStage(TrainerCallback):
        private_before: dict = {}

        def on_step_end(self, args, state, control, **kwargs):  # the save, if any, comes next
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            self.private_before = private_files(folder) if folder.is_dir() else {}

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if not state.is_world_process_zero or not (folder / "adapter_config.json").is_file():
                return
            make_shareable(folder, before=self.private_before)  # safetensors writes its files private
            make_portable(folder, base_model, sft_adapter)
            if options:
                write_json(folder / TEMPLATE_OPTIONS_FILE, options)

    return [LikeTheStage()]


def mark_finished(output_dir: str | os.PathLike, trainer: Any, metadata: dict) -> None:
    write_json(Path(output_dir) / FINISHED, {**metadata, "global_step": trainer.state.global_step})


def already_finished(output_dir: str | os.PathLike, stage: str) -> bool:
    """True (and says so) when the ``stage`` in ``output_dir`` has finished: a rerun must not train it further.
    A folder holding another finished stage (GRPO given the SFT folder) is refused: nothing there is this one's."""
    done = finished_stage(output_dir)
    if done is None:
        return False
    if done.get("stage", stage) != stage:
        raise RecTuneError(
            f"{output_dir}: holds a finished {done['stage']} stage, not an {stage} one; give this stage its own "
            "output_dir"
        )
    print(
        f"{output_dir}: the {done.get('stage', 'training')} stage finished at step {done.get('global_step')}; "
        "nothing to do (to train again, give another output_dir or remove this one)"
    )
    return True
