"""What train/sft.py and train/grpo.py share: recipes, data, precision, tracking, run files.

A recipe is a YAML mapping read through TRL's ``TrlParser``: every key is a field of one
of the script's argument dataclasses (TRL's ``SFTConfig``/``GRPOConfig``, ``ModelConfig``
and ``DatasetMixtureConfig``, plus RecTune's own below), CLI flags override the file, and
an unknown key is an error naming the key and the file.
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from rectune.benchmarks import get_benchmark
from rectune.checkpoints import adapter_chain, adapter_fingerprint, load_merged
from rectune.io import (
    DataError,
    RecTuneError,
    atomic_write,
    make_shareable,
    numbered_jsonl,
    staged_folder,
    write_json,
)
from rectune.provenance import git_commit
from rectune.sharing import make_portable, model_card, portable_name
from rectune.stages import WANDB_RUN, mark_finished, wandb_run_record

log = logging.getLogger(__name__)


@dataclass
class RunArguments:
    """RecTune's run-level settings (any recipe)."""

    recipe_name: str | None = field(default=None, metadata={"help": "Run name; defaults to the recipe file's stem."})
    wandb_project: str = field(default="rectune", metadata={"help": "W&B project the run logs to."})
    wandb_tags: list[str] = field(default_factory=list, metadata={"help": "Extra W&B tags."})
    max_train_samples: int | None = field(
        default=None, metadata={"help": "Train on this many examples only (small CPU budgets)."}
    )
    train_data: str | None = field(
        default=None,
        metadata={
            "help": "Train on this prepared file or data_prep folder instead of the recipe's `datasets` "
            "(a folder gives its train_sft.jsonl / train_rft.jsonl, or the _mix file)."
        },
    )
    eval_data: str | None = field(
        default=None,
        metadata={
            "help": "Validation file or data_prep folder (its valid_sft.jsonl / valid_rft.jsonl) for "
            "eval_strategy; default: the one beside the training data when eval_strategy is on."
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={"help": "Stop after this many evaluations without improvement (needs eval_strategy)."},
    )


@dataclass
class RftArguments:
    """GRPO-only settings: rewards, their catalog/KG, and the model RFT starts from."""

    reward_funcs: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Rewards by name (the data's benchmark's rewards) or dotted import path "
            "(my_pkg.rewards.novelty); empty = the benchmark's defaults. Weights via GRPOConfig's reward_weights."
        },
    )
    catalog: str | None = field(default=None, metadata={"help": "catalog.jsonl (default: beside the first data file)"})
    kg: str | None = field(default=None, metadata={"help": "kg.jsonl (default: beside the first data file)"})
    init_adapter: str | None = field(
        default=None,
        metadata={"help": "SFT adapter folder merged into the base model before GRPO (SFT then RFT)."},
    )


DEVICE_DEFAULTS = {"bf16": False, "fp16": False, "use_cpu": True}  # what RecTune sets without a GPU


def parse_recipe(dataclass_types: tuple[type, ...], argv: list[str] | None = None) -> tuple[Any, ...]:
    """Parse ``RECIPE.yaml [--flag value ...]`` into the dataclasses, checking the recipe first.

    Returns the dataclass instances in order, then the recipe path (or None).
    """
    from trl import TrlParser

    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        print(short_help(dataclass_types))
        sys.exit(0)
    args = ["--help" if arg == "--help-all" else arg for arg in args]
    recipe = None
    if args and not args[0].startswith("-"):
        recipe = Path(args.pop(0))
    elif "--config" in args:
        index = args.index("--config")
        recipe = Path(args[index + 1])
        del args[index : index + 2]
    if recipe is not None:
        _check_recipe(recipe, dataclass_types)
        args = ["--config", str(recipe), *args]
    if not torch.cuda.is_available():
        # No GPU: fp32 whatever the recipe says (TRL defaults to bf16, which CPUs reject), and use_cpu, without
        # which transformers runs each torchrun worker as an independent single process instead of MULTI_CPU.
        log.info("no CUDA device: training on CPU in fp32")
        args += [arg for key, value in DEVICE_DEFAULTS.items() for arg in (f"--{key}", str(value).lower())]
    try:
        parsed = TrlParser(dataclass_types).parse_args_and_config(args)
    except ValueError as err:  # HfArgumentParser's "arguments are not used", bad values in the file
        raise RecTuneError(f"{recipe or 'command line'}: {err}") from None
    for item in parsed:
        if isinstance(item, RunArguments) and item.recipe_name is None:
            item.recipe_name = recipe.stem if recipe else "run"
    return (*parsed, recipe)


def short_help(dataclass_types: tuple[type, ...]) -> str:
    """``--help``: the recipe argument and RecTune's own options first; ``--help-all`` lists every flag."""
    script = Path(sys.argv[0]).name
    lines = [
        f"usage: {script} RECIPE.yaml [--flag value ...]",
        "",
        "RECIPE.yaml  a recipe (recipes/*.yaml): any field below or of TRL's and transformers' configs;",
        "             flags on the command line override it. Unknown keys and flags are errors.",
        "",
        "RecTune options:",
    ]
    for kind in dataclass_types:
        if kind.__module__ != __name__:
            continue
        for item in dataclasses.fields(kind):
            lines.append(f"  --{item.name:26s} {item.metadata.get('help', '')}")
    lines += [
        "",
        "Often used: --output_dir DIR  --max_steps N  --learning_rate LR  --per_device_train_batch_size N",
        "            --model_name_or_path NAME  --report_to wandb|none  --push_to_hub true --hub_model_id ID",
        "            --eval_strategy steps --eval_steps N (validation from data_prep's valid_*.jsonl)",
        "",
        f"{script} --help-all lists every TRL/transformers flag.",
    ]
    return "\n".join(lines)


def _check_recipe(recipe: Path, dataclass_types: tuple[type, ...]) -> None:
    if not recipe.is_file():
        raise DataError(recipe, "recipe file not found")
    try:
        config = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise DataError(recipe, f"malformed YAML: {err}") from None
    if not isinstance(config, dict):
        raise DataError(recipe, "a recipe must be a YAML mapping of argument names to values")
    allowed = {f.name for t in dataclass_types for f in dataclasses.fields(t)}
    if "env" in config:
        # TRL copies a recipe's env: into os.environ over the user's own settings: a shared recipe could
        # point W&B at another server with the user's key, or make git run a command
        raise DataError(recipe, "key 'env': a recipe cannot set environment variables; set them in your shell")
    for key in config:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            names = ", ".join(t.__name__ for t in dataclass_types)
            raise DataError(recipe, f"unknown key {key!r} (not a field of {names}){hint}")


def use_train_data(mixture: Any, train_data: str | None, kind: str) -> None:
    """Point the mixture at ``train_data`` (a file, or a data_prep folder's training file) when given."""
    if train_data is None:
        return
    from trl.scripts.utils import DatasetConfig

    mixture.datasets = [DatasetConfig(path="json", data_files=str(prepared_file(train_data, f"train_{kind}")))]


def prepared_file(path: str | os.PathLike, prefix: str) -> Path:
    """``path`` itself, or in a data_prep folder ``PREFIX.jsonl``, else ``PREFIX_mix.jsonl``, else its only
    ``PREFIX_*.jsonl``."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise DataError(path, "no such file or folder")
    for name in (f"{prefix}.jsonl", f"{prefix}_mix.jsonl"):
        if (path / name).is_file():
            return path / name
    found = sorted(path.glob(f"{prefix}_*.jsonl"))
    if len(found) != 1:
        listed = ", ".join(p.name for p in found) or "none"
        raise DataError(path, f"no single {prefix}*.jsonl here (found: {listed}); name the file")
    return found[0]


def data_files(mixture: Any) -> list[Path]:
    """Local files named by a ``DatasetMixtureConfig``; each must exist."""
    files: list[Path] = []
    if not mixture.datasets:
        raise DataError("recipe", "no training data: set `datasets: [{path: json, data_files: FILE}]`")
    for dataset in mixture.datasets:
        names = dataset.data_files
        if names is None:
            continue
        if isinstance(names, dict):
            names = list(names.values())
        for name in [names] if isinstance(names, str) else names:
            path = Path(name)
            if not path.is_file():
                raise DataError(path, "training data file not found (run data_prep first?)")
            files.append(path)
    return files


def check_examples(path: Path, kind: str) -> None:
    """Validate a prepared training file: ``sft`` rows need chat ``messages`` ending in the
    assistant answer, ``rft`` rows a ``prompt`` plus the reward labels."""
    for line, row in numbered_jsonl(path):
        if kind == "sft":
            messages = row.get("messages")
            _check_messages(messages, "messages", path, line)
            if len(messages) < 2 or messages[-1]["role"] != "assistant":
                raise DataError(path, "field 'messages': the last message must be the assistant answer", line=line)
        else:
            _check_messages(row.get("prompt"), "prompt", path, line)
            try:
                benchmark = get_benchmark(row.get("benchmark"))
            except RecTuneError as err:
                raise DataError(path, f"field 'benchmark': {err}", line=line) from None
            for name in benchmark.label_columns:
                if name not in row:
                    raise DataError(path, f"field {name!r}: missing (needed by the rewards)", line=line)


_ROLES = ("system", "user", "assistant")


def _check_messages(messages: object, name: str, path: Path, line: int) -> None:
    """A list of ``{"role", "content"}`` chat messages with known roles and string contents."""
    if not isinstance(messages, list) or not messages:
        raise DataError(path, f"field {name!r}: must be a non-empty list of chat messages", line=line)
    for index, message in enumerate(messages):
        where = f"field {name!r}, message {index}"
        if not isinstance(message, dict):
            raise DataError(path, f"{where}: must be an object with 'role' and 'content'", line=line)
        if message.get("role") not in _ROLES:
            raise DataError(path, f"{where}: 'role' must be one of {', '.join(_ROLES)}", line=line)
        if not isinstance(message.get("content"), str):
            found = type(message.get("content")).__name__
            raise DataError(path, f"{where}: 'content' must be a string, got {found}", line=line)


def load_examples(mixture: Any, kind: str, max_samples: int | None, seed: int) -> Any:
    """The recipe's data mixture (TRL's ``get_dataset``), validated, SFT rows as prompt/completion.

    SFT uses the prompt/completion form so the loss covers the assistant answer only
    (TRL's ``completion_only_loss``), whatever the model's chat template.
    """
    from trl import get_dataset

    for path in data_files(mixture):
        check_examples(path, kind)
    dataset = get_dataset(mixture)["train"]
    if kind == "sft":
        dataset = dataset.map(
            lambda row: {"prompt": row["messages"][:-1], "completion": row["messages"][-1:]},
            remove_columns=dataset.column_names,
        )
    if max_samples is not None and max_samples < len(dataset):
        dataset = dataset.shuffle(seed=seed).select(range(max_samples))
    return dataset


def eval_examples(training_args: Any, run_args: RunArguments, mixture: Any, kind: str) -> Any | None:
    """The validation examples when the recipe evaluates during training (``eval_strategy``), else None.

    They come from ``eval_data``, else from the ``valid_{kind}.jsonl`` data_prep wrote beside the training
    data; the training rows are never split (TRL's ``test_split_size`` would take them from training).
    """
    from trl import DatasetMixtureConfig
    from trl.scripts.utils import DatasetConfig

    if training_args.eval_strategy == "no":
        if run_args.early_stopping_patience is not None:
            raise RecTuneError("early_stopping_patience needs eval_strategy (steps or epoch) and validation data")
        return None
    source = run_args.eval_data or data_files(mixture)[0].parent
    file = prepared_file(source, f"valid_{kind}")
    validation = DatasetMixtureConfig(datasets=[DatasetConfig(path="json", data_files=str(file))])
    return load_examples(validation, kind, None, training_args.seed)


def early_stopping(training_args: Any, run_args: RunArguments) -> list:
    """Transformers' early-stopping callback when ``early_stopping_patience`` is set."""
    if run_args.early_stopping_patience is None:
        return []
    if not training_args.load_best_model_at_end:
        raise RecTuneError(
            "early_stopping_patience needs load_best_model_at_end: true (and save_strategy equal to eval_strategy) "
            "so the best checkpoint is the one kept"
        )
    from transformers import EarlyStoppingCallback

    return [EarlyStoppingCallback(early_stopping_patience=run_args.early_stopping_patience)]


def set_model_init(training_args: Any, model_args: Any) -> None:
    """How the trainer loads the model: dtype matching the precision mode (fp32 on CPU), attention kernel."""
    dtype = torch.bfloat16 if training_args.bf16 else torch.float16 if training_args.fp16 else torch.float32
    training_args.model_init_kwargs = {
        "dtype": dtype,
        "attn_implementation": model_args.attn_implementation,
        **(training_args.model_init_kwargs or {}),
    }


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
    """Name the run ``<recipe>-<stage>`` and put stage, recipe, model, data and commit into its config.

    The W&B run is opened here (main process only) so the Trainer's W&B callback reuses it; a stage
    that was interrupted resumes the W&B run it opened (its id is kept in ``wandb_run.json``).
    """
    training_args.run_name = f"{run_args.recipe_name}-{metadata['stage']}"
    if "wandb" not in (training_args.report_to or []):
        return
    from accelerate import PartialState

    if not PartialState().is_main_process:
        return
    import wandb

    if "WANDB_MODE" not in os.environ and not _has_wandb_key():
        log.warning("no W&B API key found: logging offline (upload later with `wandb sync`)")
        os.environ["WANDB_MODE"] = "offline"
    os.environ.setdefault("WANDB_PROJECT", run_args.wandb_project)
    out = Path(training_args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    earlier = wandb_run_record(out)
    run = wandb.init(
        project=run_args.wandb_project,
        name=training_args.run_name,
        group=run_args.recipe_name,
        job_type=metadata["stage"],
        tags=[metadata["stage"], run_args.recipe_name, *run_args.wandb_tags],
        config={"rectune": metadata},
        dir=str(out.resolve().parent),  # W&B writes its wandb/ there: beside the stage, out of a Hub push
        id=earlier.get("id"),
        resume="allow" if earlier.get("id") else None,
    )
    write_json(out / WANDB_RUN, {"id": run.id, "project": run.project, "url": run.url})


def _has_wandb_key() -> bool:
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return bool(os.environ.get("WANDB_API_KEY")) or (netrc.is_file() and "api.wandb.ai" in netrc.read_text())


def _plain(value: Any) -> Any:
    def encode(item: Any) -> Any:
        return dataclasses.asdict(item) if dataclasses.is_dataclass(item) else str(item)

    return json.loads(json.dumps(value, default=encode))


SECRETS = ("hub_token",)  # left out of recipe.yaml (transformers would mask them, which no rerun accepts)


def resolved_recipe(dataclass_types: tuple[type, ...], argv: list[str] | None = None) -> dict[str, Any]:
    """The recipe a run used: the recipe file with the command line's flags applied (as parsed).

    Defaults are left out, so values that TRL derives from others (GRPO's generation batch size) are
    derived again on rerun, and so are RecTune's device settings (fp32 and ``use_cpu`` without a GPU).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    *parsed, recipe = parse_recipe(dataclass_types, args)
    values = dict(yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}) if recipe else {}
    flags = {arg[2:].split("=")[0] for arg in args if arg.startswith("--")}
    for config in parsed:
        for item in dataclasses.fields(config):
            if item.name in flags:
                values[item.name] = _plain(getattr(config, item.name))
    return {key: value for key, value in values.items() if key not in SECRETS}


def write_run_files(output_dir: str, configs: tuple[Any, ...], metadata: dict, recipe: Path | None, card: str) -> None:
    """``recipe.yaml`` (what reproduces the run: ``train/sft.py OUTPUT/recipe.yaml``) and the model card."""
    resolved = resolved_recipe(tuple(type(config) for config in configs))
    out = Path(output_dir)
    with atomic_write(out / "recipe.yaml") as handle:
        handle.write(f"# resolved from {recipe or 'command-line flags'}; stage {metadata['stage']}\n")
        yaml.safe_dump(resolved, handle, sort_keys=True)
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
    """Save the stage: adapter, portable base record, ``recipe.yaml``, model card, then ``finished.json``.

    The card and the base record are written before any Hub push (``push_to_hub``), in place of the
    trainer's own card, so the pushed folder is the one described here.
    """
    output_dir = trainer.args.output_dir

    def write_files(*args: Any, **kwargs: Any) -> None:
        make_portable(output_dir, base_model, sft_adapter)
        card = model_card(metadata, portable_name(base_model), wandb_run_record(output_dir).get("url"))
        write_run_files(output_dir, configs, metadata, recipe, card)

    trainer.create_model_card = write_files
    trainer.save_model(output_dir)
    if trainer.accelerator.is_main_process:
        write_files()
        mark_finished(output_dir, trainer, metadata)
        make_shareable(output_dir)


def describe_setup(trainer: Any) -> str:
    """One line saying how the run is spread: Accelerate's distributed type, processes, device, precision."""
    state = trainer.accelerator.state
    precision = "bf16" if trainer.args.bf16 else "fp16" if trainer.args.fp16 else "fp32"
    line = (
        f"training with {state.distributed_type.value} on {state.num_processes} process(es), "
        f"device {trainer.accelerator.device}, {precision}"
    )
    asked = {"ACCELERATE_USE_FSDP": "FSDP", "ACCELERATE_USE_DEEPSPEED": "DEEPSPEED"}
    for variable, kind in asked.items():
        if os.environ.get(variable, "").lower() == "true" and state.distributed_type.value != kind:
            # Accelerate switches to FSDP from GPU-like multi-device types only: CPU workers stay MULTI_CPU
            line += f" (the Accelerate config asks for {kind}, which Accelerate does not run on this device)"
    return line


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


def merged_model(adapter_dir: str | Path) -> Path:
    """The base model with the adapter merged in, saved once as ``<adapter_dir>/merged``.

    SFT then RFT merges the SFT adapter and trains a fresh RFT adapter on top: GRPO's
    reference policy is then the SFT model, and the RFT adapter loads onto a plain folder.
    """
    from transformers import AutoTokenizer

    adapter_dir = Path(adapter_dir)
    base, merged = adapter_chain(adapter_dir)  # a clear error when this is no adapter folder (run SFT first)
    target = adapter_dir / "merged"
    source = adapter_fingerprint(adapter_dir)
    if (target / "config.json").is_file() and _recorded_source(target) == source:
        return target
    if target.exists():
        log.info("%s was merged from an earlier version of the adapter: merging again", target)
    model = load_merged(base, [*merged, str(adapter_dir)], torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(adapter_dir)
    with staged_folder(target, replace=True) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / MERGED_FROM).write_text(source + "\n")
    return target


MERGED_FROM = "merged_from.sha256"  # the adapter a merged model was built from


def _recorded_source(merged: Path) -> str | None:
    path = merged / MERGED_FROM
    return path.read_text().strip() if path.is_file() else None
