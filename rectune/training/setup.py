"""A training stage's setup and end: precision, saving the stage, shutting down cleanly."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import yaml

from rectune.core.file_modes import make_shareable, private_files
from rectune.core.io import RecTuneError, atomic_write, write_json
from rectune.models.chat_format import render_chat
from rectune.models.checkpoints import wandb_run_record
from rectune.models.model_folders import LEARNED, check_adapter_patterns, context_positions, error_text, on_meta_device
from rectune.models.sharing import make_portable, model_card, portable_name
from rectune.models.template_options import TEMPLATE_OPTIONS_FILE
from rectune.training.hub_upload import keeping_upload_failures, upload_failed_text
from rectune.training.recipes import resolved_recipe
from rectune.training.sft_base import MERGED_SFT_BASE, drop_merged_model
from rectune.training.stages import full_disk_said, mark_finished, seal_output_dir

log = logging.getLogger(__name__)


def write_run_files(output_dir: str, configs: tuple[Any, ...], metadata: dict, recipe: Path | None, card: str) -> None:
    """``recipe.yaml`` (what reproduces the run: ``train/sft.py OUTPUT/recipe.yaml``), the chat template's variables
    where the stage rendered its prompts with some (evaluation renders with them too), and the model card."""
    resolved = resolved_recipe(tuple(type(config) for config in configs))
    out = Path(output_dir)
    with atomic_write(out / "recipe.yaml") as handle:
        handle.write(f"# resolved from {recipe or 'command-line flags'}; stage {metadata['stage']}\n")
        yaml.safe_dump(resolved, handle, sort_keys=True)
    options = next((c.chat_template_kwargs for c in configs if getattr(c, "chat_template_kwargs", None)), None)
    if options:
        write_json(out / TEMPLATE_OPTIONS_FILE, options)
    with atomic_write(out / "README.md") as handle:
        handle.write(card)


def save_stage(
    trainer: Any,
    configs: tuple[Any, ...],
    metadata: dict,
    recipe: Path | None,
    base_model: str,
    sft_adapter: str | None = None,
) -> None:
    """Save the stage: adapter, portable base record, run files (:func:`write_run_files`), then ``finished.json``.

    The card and the base record are written before any Hub push (``push_to_hub``), in place of the
    trainer's own card, so the pushed folder is the one described here. The files this save wrote are made
    readable to others (safetensors writes them private), as each checkpoint's are as it is saved
    (:func:`rectune.training.stages.checkpoints_like_the_stage`); nothing else is touched, a private file of
    yours put in the folder while it trained included.
    """
    output_dir = trainer.args.output_dir

    def write_files(*args: Any, **kwargs: Any) -> None:
        make_portable(output_dir, base_model, sft_adapter)
        card = model_card(metadata, portable_name(base_model), wandb_run_record(output_dir).get("url"))
        write_run_files(output_dir, configs, metadata, recipe, card)

    trainer.create_model_card = write_files
    private_before = private_files(output_dir)  # what the save leaves private is made readable after it
    with full_disk_said(output_dir, "the stage"), keeping_upload_failures(trainer) as upload_failures:
        trainer.save_model(output_dir)
    if trainer.accelerator.is_main_process:
        with full_disk_said(output_dir, "the stage"):
            write_files()
        short = stopped_short(trainer)
        if short:  # a data order that ran dry: the stage is not done, and a rerun must resume it
            trainer.accelerator.print(f"{output_dir}: {short}; saved, not marked finished: rerun to resume")
        else:
            mark_finished(output_dir, trainer, metadata)
        for reason in upload_failures:
            log.warning(upload_failed_text(trainer, reason))
        if sft_adapter and drop_merged_model(Path(output_dir) / MERGED_SFT_BASE):  # 12 GB at 3B; no file names it
            trainer.accelerator.print(f"removed the merged SFT base {MERGED_SFT_BASE} (train/sft_base.py builds one)")
        make_shareable(output_dir, before=private_before)
        if not short:
            seal_output_dir(output_dir)


def card_while_training(trainer: Any, metadata: dict, base_model: str) -> None:
    """Each checkpoint TRL saves rewrites the stage folder's card (its own, naming the base model ``None``);
    ours goes there instead, saying the stage is still training."""

    def write_card(*args: Any, **kwargs: Any) -> None:
        if trainer.accelerator.is_main_process:
            card = model_card(metadata, portable_name(base_model), training=True)
            with atomic_write(Path(trainer.args.output_dir) / "README.md") as handle:
                handle.write(card)

    trainer.create_model_card = write_card


def stopped_short(trainer: Any) -> str | None:
    """Why the run ended before ``max_steps`` without early stopping telling it to (None: it did not)."""
    from transformers import EarlyStoppingCallback

    wanted, reached = trainer.args.max_steps, trainer.state.global_step
    early = any(
        isinstance(callback, EarlyStoppingCallback)
        and callback.early_stopping_patience_counter >= callback.early_stopping_patience
        for callback in trainer.callback_handler.callbacks
    )
    if wanted > 0 and reached < wanted and not early:
        return f"training stopped at step {reached} of max_steps {wanted} (the data ran out)"
    return None


def keeps_packed_sequences_apart(attention: str) -> bool:
    """Whether an attention implementation attends within each packed sequence of a flattened row at the cost
    of those sequences alone: flash attention by their boundaries, flex attention by a block-sparse mask."""
    return "flash" in attention or attention == "flex_attention"


def one_packed_sequence_a_forward(training_args: Any, model_args: Any) -> str | None:
    """TRL's padding-free packing flattens a device's batch of packed sequences into one row. Flash attention
    keeps the sequences apart at no cost; SDPA and eager attention run over the whole row under a
    block-diagonal mask, so B sequences of L tokens cost the attention of one of B x L (8 x 1,024 tokens:
    8 times what the batch needs); flex attention skips the blocks outside each document. Without flash
    or flex attention the batch is trained one packed sequence a forward with B times the gradient
    accumulation: the same tokens per optimizer step and the same loss, which TRL averages over the
    accumulated tokens. Returns the log line, or None when nothing changed."""
    batch = training_args.per_device_train_batch_size
    attention = str(model_args.attn_implementation or "sdpa")
    flattened = training_args.packing and training_args.packing_strategy != "wrapped" and batch > 1
    if not flattened or keeps_packed_sequences_apart(attention):
        return None
    training_args.gradient_accumulation_steps *= batch
    training_args.per_device_train_batch_size = 1
    line = (
        f"packed sequences with {attention} attention: 1 a forward, gradient_accumulation_steps "
        f"{training_args.gradient_accumulation_steps} (was {batch} flattened into one row, attending over "
        f"{batch} x max_length tokens)"
    )
    log.info(line)
    return line


def check_kernels(training_args: Any, model_args: Any) -> None:
    """Settings whose package or device is missing stop here in one line, not in a traceback mid-training."""
    import importlib.util

    if getattr(training_args, "use_liger_kernel", False) and importlib.util.find_spec("liger_kernel") is None:
        raise RecTuneError("use_liger_kernel needs the liger-kernel package (pip install liger-kernel; CUDA GPUs only)")
    quantized = next((key for key in ("load_in_4bit", "load_in_8bit") if getattr(model_args, key, False)), None)
    if quantized and importlib.util.find_spec("bitsandbytes") is None:  # transformers asks once the folder is held
        raise RecTuneError(f"{quantized} needs the bitsandbytes package (pip install bitsandbytes)")
    if getattr(training_args, "use_vllm", False) and importlib.util.find_spec("vllm") is None:  # TRL asks after loading
        raise RecTuneError("use_vllm needs the vllm package (pip install vllm), or use_vllm: false")
    on_cpu = getattr(training_args, "use_cpu", False) or not torch.cuda.is_available()
    if getattr(training_args, "activation_offloading", False) and on_cpu:  # an AttributeError as training began
        raise RecTuneError("activation_offloading moves activations from a GPU to the CPU: it needs a CUDA device")
    if model_args.attn_implementation == "flex_attention" and on_cpu:
        # PyTorch raises in the first backward pass, after loading the model and data
        raise RecTuneError(
            "attn_implementation flex_attention trains on GPUs only (PyTorch has no CPU backward for it)"
        )


@contextlib.contextmanager
def settings_the_trainer_takes() -> Iterator[None]:
    """TRL's ValueError (NotImplementedError: ``sync_ref_model`` with PEFT) as it builds its trainer, as one line:
    settings that contradict one another or the model (``padding_free`` without packing, ``assistant_only_loss``
    with a template marking no answer, ``gradient_checkpointing_kwargs`` checkpointing does not take). So are a
    package a setting needs (bitsandbytes for a quantization) and weights ``model_init_kwargs`` name that are not
    there (a ``subfolder``, ``variant`` or ``gguf_file``): transformers' ImportError and OSError."""
    try:
        yield
    except RecTuneError:
        raise
    except (ValueError, ImportError, NotImplementedError) as err:
        raise RecTuneError(f"the trainer refuses these settings: {' '.join(str(err).split())[:600]}") from None
    except OSError as err:
        if err.errno is not None:  # the system's own (a full disk): said as such by the entry script
            raise
        raise RecTuneError(f"the model cannot be loaded as asked: {' '.join(str(err).split())[:600]}") from None


def check_model_fits(model_name: str, model_args: Any, training_args: Any) -> tuple[int, str] | None:
    """Stop in one line, before the run claims its folder, where the recipe asks of the model what it lacks: no
    LoRA adapter (every stage saves, chains and merges one: a full model trained, then failed as it saved), LoRA
    target modules none of its modules match (PEFT's traceback), SFT's ``max_length`` past its learned positions
    (GPT-2's 1,024: an IndexError mid-run). On the model built on the meta device, PEFT's adapter too; not for a
    model whose own Python the command line trusts. Returns its positions (``context_positions``), for GRPO."""
    from peft.utils.error import NoMatchingPeftModuleError
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig
    from trl import get_peft_config

    if not model_args.use_peft:
        raise RecTuneError("recipe key 'use_peft': not true; RecTune trains LoRA adapters: set use_peft: true")
    if training_args.trust_remote_code or (training_args.model_init_kwargs or {}).get("trust_remote_code"):
        return None
    config = AutoConfig.from_pretrained(model_name)
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:  # a local folder's is checked before: a hub id's here
        raise RecTuneError(f"{model_name}: its model_type {config.model_type!r} names no causal language model")
    model = on_meta_device(config)
    positions, max_length = context_positions(model), getattr(training_args, "max_length", None)  # GRPO has none
    limit = positions[0] if positions and positions[1] == LEARNED else None  # a rotary model's SFT may run past
    if max_length is not None and limit is not None and max_length > limit:
        raise RecTuneError(
            f"recipe key 'max_length': {max_length} passes the {limit} learned positions of {model_name}; give "
            f"{limit} or less"
        )
    peft_config = get_peft_config(model_args)
    try:
        if peft_config is not None:
            check_adapter_patterns(model, peft_config, "the recipe's LoRA settings")
    except RecTuneError:
        raise
    except NoMatchingPeftModuleError:
        linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                         if isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"})  # fmt: skip
        raise RecTuneError(
            f"recipe key 'lora_target_modules': {model_args.lora_target_modules!r} names none of {model_name}'s "
            f"modules (its linear ones: {', '.join(linear)})"
        ) from None
    except ValueError as err:  # PEFT's word on LoRA settings this model cannot take
        raise RecTuneError(f"the recipe's LoRA settings on {model_name}: {error_text(err)}") from None
    return positions


def check_examples_fit(trainer: Any, examples: Any, max_length: int | None) -> None:
    """Stop in one line when ``max_length`` cut every example before its answer: TRL drops those (they carry no
    loss), and an empty training set would fail later in its sampler, naming neither key nor length."""
    if max_length is None or len(trainer.train_dataset) > 0:
        return
    tokenizer = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    name = getattr(tokenizer, "name_or_path", "the model")
    texts = (render_chat(tokenizer, e["prompt"] + e["completion"], name) for e in examples)
    shortest = min(len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in texts)
    raise RecTuneError(
        f"max_length {max_length}: every training example is cut before its answer (the shortest is {shortest} "
        "tokens with its answer); raise max_length"
    )


def describe_setup(trainer: Any) -> str:
    """One line saying how the run is spread and computed: Accelerate's distributed type, processes, device,
    precision, the base weights' dtype or quantization, and the speed settings as the model and trainer hold them
    (attention kernel, activation checkpointing, Liger kernels, torch.compile)."""
    state = trainer.accelerator.state
    args = trainer.args
    precision = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
    model = trainer.model
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None) or "default"
    bits = 4 if getattr(model, "is_loaded_in_4bit", False) else 8 if getattr(model, "is_loaded_in_8bit", False) else 0
    weights = f"{bits}-bit" if bits else str(getattr(model, "dtype", "")).removeprefix("torch.")
    checkpointing = getattr(model, "is_activation_checkpointing", False)
    kind = state.distributed_type.value
    spread = "one process, not distributed" if kind == "NO" else f"{kind} on {state.num_processes} processes"
    line = (
        f"training with {spread}, "
        f"device {trainer.accelerator.device}, {precision}, base weights {weights}, attention {attention}, "
        f"activation checkpointing {'on' if checkpointing else 'off'}, "
        f"Liger kernels {'on' if args.use_liger_kernel else 'off'}, "
        f"torch.compile {'on' if args.torch_compile else 'off'}"
    )
    asked = {"ACCELERATE_USE_FSDP": "FSDP", "ACCELERATE_USE_DEEPSPEED": "DEEPSPEED"}
    for variable, kind in asked.items():
        if os.environ.get(variable, "").lower() == "true" and state.distributed_type.value != kind:
            # Accelerate switches to FSDP from GPU-like multi-device types only: CPU workers stay MULTI_CPU
            line += f" (the Accelerate config asks for {kind}, which Accelerate does not run on this device)"
    return line


def announce_setup(trainer: Any) -> None:
    """Print :func:`describe_setup`'s line once training starts, when the trainer has applied every setting
    (activation checkpointing is switched on inside ``train()``)."""
    from transformers import TrainerCallback

    class Announce(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            trainer.accelerator.print(describe_setup(trainer))

    trainer.add_callback(Announce())


def peak_memory() -> str:
    """The run's peak memory: the accelerator's allocations on a GPU, else the process's resident size."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return f"peak GPU memory {torch.cuda.max_memory_allocated() / 1024**3:.2f} GiB (allocated by torch)"
    import resource

    return f"peak resident memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.2f} GiB"


def finish(trainer: Any) -> None:
    """End a run cleanly on every process.

    The DDP wrapper is dropped while all workers are still alive: destroyed after the process
    group (at interpreter exit) its gloo reducer waits forever for peers that have left. The W&B
    run opened by :func:`init_tracking` is finished here, so its file holds every logged step
    (left to the interpreter's exit hooks, a loaded machine cut its history short).
    """
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.free_memory()
    trainer.model_wrapped = None
    gc.collect()
    trainer.end()
    wandb = sys.modules.get("wandb")
    if wandb is not None and wandb.run is not None:
        wandb.finish()
