"""Training data: the prepared files a recipe names, checked row by row, loaded as TRL datasets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rectune.benchmarks import get_benchmark
from rectune.io import DataError, RecTuneError, numbered_jsonl
from rectune.recipes import RunArguments


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
