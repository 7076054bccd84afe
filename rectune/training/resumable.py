"""Which checkpoints a run may resume from: complete ones, of the adapter it builds, whose states load as data.

A checkpoint counts once fully written (the Trainer writes ``trainer_state.json`` last). DeepSpeed resumes
from a checkpoint's ``global_step*/`` states with ``torch.load(weights_only=False)``: Python's pickle, which
calls whatever a file names. A run folder copied from elsewhere (its marker too) or a checkpoint named on the
command line is a stranger's, so its states are scanned for what they would call before anything loads, and
loaded under torch's weights-only unpickler with DeepSpeed's own state classes allowed, and nothing else.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rectune.core.io import RecTuneError, check_plain_files, read_json_object
from rectune.models.checkpoints import adapter_chain, check_adapters_fit, finished_stage
from rectune.models.fingerprints import adapter_fingerprint
from rectune.models.model_folders import safetensors_problem

# What DeepSpeed's ZeRO and fp16/bf16 optimizers pickle beside tensors and plain data: classes of data only
DEEPSPEED_STATE_CLASSES = (
    "deepspeed.runtime.fp16.loss_scaler.LossScaler", "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum", "deepspeed.utils.tensor_fragment.fragment_address",
)  # fmt: skip
WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"  # torch's switch: weights only, even where a caller asks otherwise
ANY_PICKLE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"  # its opposite; torch refuses every load while both are set
LATEST_BYTES = 4096  # DeepSpeed's `latest` file holds a folder's name


def checkpoint_step(checkpoint: Path) -> str:
    return checkpoint.name.removeprefix("checkpoint-")


# what an adapter's checkpoint records of its shape and scale -> the ModelConfig key that sets it
ADAPTER_KEYS = {
    "r": "lora_r", "lora_alpha": "lora_alpha", "target_modules": "lora_target_modules", "use_dora": "use_dora",
    "use_rslora": "use_rslora", "modules_to_save": "lora_modules_to_save",
}  # fmt: skip


def check_named_checkpoint(
    training_args: Any, model_args: Any, model_name: str, sft_adapter: str | None = None
) -> None:
    """A ``resume_from_checkpoint`` given by name must be a complete checkpoint of the adapter this run builds,
    checked before the run claims its folder: one of another rank or other modules was a traceback as its
    weights or optimizer state loaded, and one of another ``lora_alpha`` trained on, scaled otherwise, silently;
    its weights' shapes are checked against ``model_name`` (one trained on another model), and it must have been
    trained over the SFT adapter this run merges in (``sft_adapter``), or over none when this run merges none."""
    named = training_args.resume_from_checkpoint
    if not named or finished_stage(training_args.output_dir) is not None:
        return  # a finished stage is not trained again (already_finished says so), whatever it would resume from
    path = Path(named)
    problem = checkpoint_problem(path, named_by_step=False) if path.is_dir() else "no such folder"
    if problem:
        raise RecTuneError(f"resume_from_checkpoint {named}: {problem}")
    check_pickled_states(path)
    if not (path / "adapter_config.json").is_file() or not model_args.use_peft:
        return  # the trainer's own loading says what does not fit a full model's checkpoint
    saved = read_json_object(path / "adapter_config.json")
    for key, setting in ADAPTER_KEYS.items():
        theirs, ours = saved.get(key), getattr(model_args, setting)
        if key in ("target_modules", "modules_to_save") and isinstance(theirs, list) and isinstance(ours, list):
            theirs, ours = sorted(theirs), sorted(ours)
        elif key in ("target_modules", "modules_to_save"):
            continue  # a pattern or all-linear: PEFT resolves it against the model; its loading then says
        if theirs != ours:
            raise RecTuneError(
                f"resume_from_checkpoint {named}: its adapter has {key} {theirs!r}, this run's {setting} is {ours!r}; "
                "resume with the settings it was trained with"
            )
    check_adapters_fit(model_name, [named])
    theirs, ours = adapter_chain(path)[1], [*adapter_chain(sft_adapter)[1], sft_adapter] if sft_adapter else []
    if list(map(adapter_fingerprint, theirs)) != list(map(adapter_fingerprint, ours)):
        raise RecTuneError(
            f"resume_from_checkpoint {named}: it was trained over {_over(theirs)}, this run trains over "
            f"{_over(ours)}; resume from a checkpoint of this stage"
        )


def _over(merged: list[str]) -> str:
    return "SFT adapter " + ", ".join(map(str, merged)) if merged else "the base model alone"


def checkpoint_problem(checkpoint: Path, named_by_step: bool = True) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or None when it is complete (``named_by_step``: its folder's
    name gives the step, as the checkpoints a run finds in its own folder do)."""
    state_path = checkpoint / "trainer_state.json"
    if not state_path.is_file():
        return "no trainer_state.json"
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, ValueError):
        return "trainer_state.json is cut short or malformed"
    step = state.get("global_step") if isinstance(state, dict) else None
    if (
        not isinstance(step, int)
        or isinstance(step, bool)
        or (named_by_step and str(step) != checkpoint_step(checkpoint))
    ):
        return "trainer_state.json does not match the folder's step"
    weights = sorted(checkpoint.glob("*.safetensors"))
    if not weights and (any(checkpoint.glob("global_step*")) or any(checkpoint.glob("*.index.json"))):
        return None  # DeepSpeed's and sharded checkpoints: their own loaders check them
    if not weights:
        # pickle weights (.bin) would be unpickled on resume: code from a file; only safetensors are loaded
        return "no safetensors weights" + (
            " (pickle .bin weights are not loaded)" if any(checkpoint.glob("*.bin")) else ""
        )
    return next((problem for problem in map(safetensors_problem, weights) if problem), None)


def check_pickled_states(checkpoint: str | os.PathLike) -> None:
    """One line where resuming from ``checkpoint`` would unpickle more than data: DeepSpeed states
    (``global_step*/*.pt``) that call anything but DeepSpeed's state classes, or that ``torch.save`` did not write;
    a ``latest`` file naming any folder but one of the checkpoint's ``global_step*`` (DeepSpeed loads from the
    folder it names, wherever that is)."""
    checkpoint = Path(checkpoint)
    check_plain_files(checkpoint)  # a FIFO or a link to a device: reading it would wait or never end
    folders = {folder.name: folder for folder in checkpoint.glob("global_step*") if folder.is_dir()}
    latest = checkpoint / "latest"
    if folders and latest.is_file():
        with open(latest, "rb") as file:
            tag = file.read(LATEST_BYTES).decode("utf-8", errors="replace").strip()
        if tag not in folders:
            raise RecTuneError(
                f"{latest}: names {tag[:80]!r}, not one of this checkpoint's global_step folders; DeepSpeed would "
                "load its states from there"
            )
    for folder in folders.values():
        check_plain_files(folder)
        for states in sorted(folder.rglob("*.pt")):
            calls = _pickled_calls(states)
            if calls:
                raise RecTuneError(
                    f"{states}: its pickle calls {', '.join(calls)}, which loading it would run; RecTune loads "
                    "DeepSpeed's states as tensors, plain data and DeepSpeed's own state classes only"
                )


def _pickled_calls(states: Path) -> list[str]:
    """What loading ``states`` would call beyond tensors, plain data and DeepSpeed's state classes, read from its
    pickle's opcodes without running them."""
    import torch

    try:
        named = torch.serialization.get_unsafe_globals_in_checkpoint(states)
    except (ValueError, RuntimeError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise RecTuneError(f"{states}: not DeepSpeed states as torch.save writes them ({err})") from None
    return sorted(set(named) - set(DEEPSPEED_STATE_CLASSES))


@contextmanager
def states_read_as_data() -> Iterator[None]:
    """Every ``torch.load`` within reads weights only (DeepSpeed's ``weights_only=False`` too), DeepSpeed's state
    classes allowed where DeepSpeed is loaded: a pickle the scan above missed still cannot run code."""
    import torch

    allowed = []
    if "deepspeed" in sys.modules:  # DeepSpeed's engine loads the states; its classes are imported here
        dotted = (name.rpartition(".") for name in DEEPSPEED_STATE_CLASSES)
        allowed = [getattr(importlib.import_module(module), name) for module, _, name in dotted]
    saved = {name: os.environ.pop(name, None) for name in (WEIGHTS_ONLY, ANY_PICKLE)}
    os.environ[WEIGHTS_ONLY] = "1"
    try:
        with torch.serialization.safe_globals(allowed):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
