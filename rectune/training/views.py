"""Training data: the prepared files a recipe names, checked row by row, loaded as TRL datasets.

Data_prep folders store each row once, as canonical rows (``train.jsonl``, ``valid.jsonl``). The
training files a recipe names are *views* of them, derived when training starts by the benchmark's
own prompt functions: ``train_sft_pointwise.jsonl`` is the SFT examples of ``train.jsonl``'s
pointwise rows, ``train_rft_mix.jsonl`` (or ``train_rft.jsonl``) the RFT prompts of all its rows,
``valid_sft.jsonl`` those of ``valid.jsonl``. A file that exists is read as it is, so folders
prepared before views (which stored every view) still load.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import re
from pathlib import Path
from typing import Any

from rectune.benchmarks import get_benchmark
from rectune.core.io import DataError, RecTuneError, atomic_write, json_line, numbered_jsonl, require_file
from rectune.data.prompt_options import recorded_prompt
from rectune.models.chat_format import (
    FOLDED,
    check_chat_template,
    check_examples_render,
    check_vocabulary,
    configured_vocabulary,
    fold_system,
    load_tokenizer,
    render_chat,
    takes_system_messages,
)
from rectune.models.model_folders import error_text
from rectune.training.arguments import RunArguments

log = logging.getLogger(__name__)

# A chat that any template renders: no system message, which some refuse
A_CHAT = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]

VIEW = re.compile(r"^(train|valid)_(sft|rft)(?:_(\w+))?\.jsonl$")  # split, kind, task (absent or mix: all)


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
    if path.is_file() or view_source(path) is not None:
        return path  # a file, or a view name derived from train.jsonl / valid.jsonl beside it
    if not path.is_dir():  # a FIFO or a device says what it is
        require_file(path, missing="no such file or folder (nor a view of a train.jsonl or valid.jsonl beside it)")
    for name in (f"{prefix}.jsonl", f"{prefix}_mix.jsonl"):
        if (path / name).is_file():
            return path / name
    found = sorted(path.glob(f"{prefix}_*.jsonl"))
    if not found and view_source(path / f"{prefix}.jsonl") is not None:
        return path / f"{prefix}.jsonl"  # a view of all the split's rows, derived when loaded
    if len(found) != 1:
        listed = ", ".join(p.name for p in found) or "none"
        raise DataError(path, f"no single {prefix}*.jsonl here (found: {listed}); name the file")
    return found[0]


def data_files(mixture: Any) -> list[Path]:
    """Local files named by a ``DatasetMixtureConfig``; each must exist. Every dataset names its files: the
    prepared JSONL rows are what training reads (without them, the ``json`` builder or a Hub dataset's name
    was a traceback from ``datasets`` after the run had claimed its folder)."""
    files: list[Path] = []
    if not mixture.datasets:
        raise DataError("recipe", "no training data: set `datasets: [{path: json, data_files: FILE}]`")
    if mixture.streaming:  # an IterableDataset: a TypeError once the run held its folder
        raise DataError("recipe", "key 'streaming': RecTune reads the prepared rows whole, to check and count them")
    if mixture.test_split_size is not None:  # TRL's unseeded split, whose test part training then never saw
        raise DataError("recipe", "key 'test_split_size' would take rows out of the training data; validation is "
                        "the valid_*.jsonl beside them, or eval_data")  # fmt: skip
    for number, dataset in enumerate(mixture.datasets):
        if dataset.path != "json":  # another builder read the rows as CSV or text: a traceback
            raise DataError("recipe", f"datasets[{number}]: path {dataset.path!r}: the prepared rows are JSONL "
                            "(path: json)")  # fmt: skip
        names = dataset.data_files
        if not names:
            raise DataError("recipe", f"datasets[{number}] (path {dataset.path!r}) names no data_files: set "
                            "`data_files: FILE`, a prepared train_*.jsonl")  # fmt: skip
        if isinstance(names, dict):
            names = list(names.values())
        for name in [names] if isinstance(names, str) else names:
            path = Path(name)
            if not path.is_file() and view_source(path) is None:  # a folder, a FIFO or a device says what it is
                require_file(path, missing="training data file not found (run data_prep first?)")
            files.append(path)
    return files


def view_source(path: Path) -> tuple[Path, str, str | None] | None:
    """For a view name whose file does not exist: the canonical rows it derives from, its kind and task."""
    match = VIEW.match(path.name)
    if match is None or path.is_file():
        return None
    rows = path.parent / f"{match[1]}.jsonl"
    return (rows, match[2], None if match[3] in (None, "mix") else match[3]) if rows.is_file() else None


def read_files(files: list[Path]) -> list[tuple[str, Path]]:
    """``("training data", file)`` for each file a run reads: a view's canonical rows, else the file named."""
    return [("training data", (view_source(path) or (path,))[0]) for path in files]


def view_examples(path: Path) -> list[dict]:
    """The examples of the view ``path`` (see the module docstring), in the rows' order; RFT labels are
    computed over the whole split, so a group's labels see all its rows."""
    from rectune.benchmarks import load_rows

    rows_path, kind, task = view_source(path)
    if rows_path.stat().st_size == 0:  # an empty split (no validation share): an empty view, as stored before
        return []
    rows = load_rows(rows_path)
    variant = recorded_prompt(rows_path)  # RecBench+'s prompt options
    benchmark = get_benchmark(rows[0].benchmark)
    wanted = [task in (None, row.task) for row in rows]
    if not any(wanted):
        raise DataError(path, f"{rows_path.name} holds no {task!r} rows (tasks: {', '.join(benchmark.tasks)})")
    if kind == "sft":
        return [benchmark.sft_example(row, variant) for row, keep in zip(rows, wanted, strict=True) if keep]
    examples = benchmark.rft_examples(rows, variant)
    return [example for example, keep in zip(examples, wanted, strict=True) if keep]


def cached_view(name: str, examples: list[dict]) -> Path:
    """The examples of the view ``name`` as a file named by their content, in datasets' cache folder (which
    loading needs writable anyway), beside the Arrow cache made from it.

    A run on the rows an earlier run read names the same file, unchanged: datasets keys its Arrow cache of a
    local file by path and modification time, so that cache (and TRL's tokenization of it) is reused, where a
    fresh file for every run left a new copy of the training data in that cache each time, and a run killed
    outright (an out-of-memory kill) leaves nothing the next run does not reuse.
    """
    import datasets

    text = "".join(map(json_line, examples)).encode()
    folder = Path(datasets.config.HF_DATASETS_CACHE) / "rectune-views"
    folder.mkdir(parents=True, exist_ok=True)  # shared or private as datasets' own cache of the same rows
    target = folder / f"{hashlib.sha256(text).hexdigest()[:32]}-{name}"
    if not (target.is_file() and target.stat().st_size == len(text) and target.read_bytes() == text):
        with atomic_write(target, "wb") as handle:
            handle.write(text)
    return target


def materialise_views(mixture: Any, kind: str) -> None:
    """Point the mixture's view names at derived files TRL's loader can read (the prepared folder is only read)."""
    for dataset in mixture.datasets:
        names = dataset.data_files
        if names is None or isinstance(names, dict):
            continue
        resolved = []
        for name in [names] if isinstance(names, str) else names:
            source = view_source(Path(name))
            if source is None:
                resolved.append(name)
                continue
            if source[1] != kind:
                raise DataError(name, f"an {source[1].upper()} view, but this is {kind.upper()} training")
            examples = view_examples(Path(name))
            if not examples:  # datasets' JSON loader stops on an empty file with a bare StopIteration
                rows = source[0].name
                why = f"{rows} beside it is empty" if source[0].stat().st_size == 0 else f"no row of {rows} makes one"
                held_out = " (data_prep held none out: --valid-size)" if rows.startswith("valid") else ""
                raise DataError(name, f"no examples: {why}{held_out}")
            resolved.append(str(cached_view(Path(name).name, examples)))
        dataset.data_files = resolved[0] if isinstance(names, str) else resolved


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
            problem = benchmark.label_problem(row)
            if problem:
                raise DataError(path, problem, line=line)


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
        if path.is_file():
            check_examples(path, kind)
    mixture = copy.deepcopy(mixture)  # the recipe's own keeps naming the prepared folder
    materialise_views(mixture, kind)
    try:
        dataset = get_dataset(mixture)["train"]
    except (ValueError, KeyError, TypeError) as err:  # the recipe's split, columns or builder: datasets' own word
        raise DataError("recipe", f"key 'datasets': {error_text(err)}") from None
    if kind == "sft":
        dataset = dataset.map(
            lambda row: {"prompt": row["messages"][:-1], "completion": row["messages"][-1:]},
            remove_columns=dataset.column_names,
        )
    if max_samples is not None and max_samples < len(dataset):
        dataset = dataset.shuffle(seed=seed).select(range(max_samples))
    return dataset


def eval_examples(training_args: Any, run_args: RunArguments, mixture: Any, kind: str) -> Any | None:
    """The validation examples when the recipe evaluates during training (``eval_strategy``, ``eval_on_start``),
    else None.

    They come from ``eval_data``, else from the ``valid_{kind}.jsonl`` data_prep wrote beside the training
    data; the training rows are never split (TRL's ``test_split_size`` would take them from training).
    """
    from trl import DatasetMixtureConfig
    from trl.scripts.utils import DatasetConfig

    if training_args.eval_strategy == "no" and run_args.early_stopping_patience is not None:
        raise RecTuneError("early_stopping_patience needs eval_strategy (steps or epoch) and validation data")
    if training_args.eval_strategy == "no" and not training_args.eval_on_start:  # (that one evaluation needs data)
        return None
    source = run_args.eval_data or data_files(mixture)[0].parent
    file = prepared_file(source, f"valid_{kind}")
    validation = DatasetMixtureConfig(datasets=[DatasetConfig(path="json", data_files=str(file))])
    return load_examples(validation, kind, None, training_args.seed)


def check_chat_template_path(path: str | None, model_name: str) -> None:
    """Stop in one line, before the run claims its folder, when SFT's ``chat_template_path`` is no template TRL
    can apply: a ``.jinja`` or ``.j2`` file that is not UTF-8 or that the model's tokenizer cannot render a chat
    with (a syntax error), or anything else, which TRL takes for a tokenizer to clone the template and special
    tokens of, where none loads. Each was a traceback once the run had claimed its folder."""
    from jinja2.exceptions import TemplateError

    if path is None:
        return
    if Path(path).is_file() and path.endswith((".jinja", ".j2")):
        tokenizer = load_tokenizer(model_name)
        try:
            tokenizer.chat_template = given_template(path)
            render_chat(tokenizer, A_CHAT, path)
        except (UnicodeDecodeError, TemplateError) as err:
            raise DataError(Path(path), f"recipe key 'chat_template_path': no chat template {model_name}'s "
                            f"tokenizer can render: {error_text(err)}") from None  # fmt: skip
        return
    try:
        tokenizer = load_tokenizer(path)
    except Exception as err:  # a hub id that is not cached, a path that is neither file nor folder
        raise RecTuneError(
            f"recipe key 'chat_template_path': {path!r} is neither a .jinja or .j2 file nor a tokenizer that loads "
            f"({error_text(err)})"
        ) from None
    check_chat_template(tokenizer, path, "a tokenizer with one or a .jinja file")


def fit_chat_template(
    model_name: str, chat_template_path: str | None, *datasets: Any, eos_token: str | None = None,
    pad_token: str | None = None, options: dict | None = None,
) -> tuple[Any, ...]:  # fmt: skip
    """The examples as the chat template of ``model_name``'s tokenizer (a model, or an SFT adapter's folder)
    can render them: where it takes no system message, each prompt's system prompt opens its first user
    message (as evaluation renders them). A folder without a readable tokenizer stops here in one line, and so
    do a tokenizer without a template and SFT's ``eos_token`` and ``pad_token`` where its vocabulary lacks
    them (TRL's errors, tracebacks), unless ``chat_template_path`` gives a template (TRL applies it as it is:
    cloned from another tokenizer, it brings that tokenizer's special tokens). Every example is rendered once,
    with the template and variables (GRPO's ``options``) TRL will use, under the limits of RecTune's own
    renderings before TRL renders it without them."""
    tokenizer = load_tokenizer(model_name)
    if chat_template_path:  # TRL applies the template given as it is (checked by check_chat_template_path)
        if any(data is not None for data in datasets):
            tokenizer.chat_template = given_template(chat_template_path)
            check_all_render(tokenizer, datasets, chat_template_path, options)
        return datasets
    for key, token in (("eos_token", eos_token), ("pad_token", pad_token)):
        if token is not None and token not in tokenizer.get_vocab():
            raise RecTuneError(f"recipe key {key!r}: {token!r} is no token of {model_name}'s tokenizer")
    if (eos_token or tokenizer.eos_token) is None:
        raise DataError(Path(model_name), "its tokenizer names no end-of-sequence token: add eos_token to its "
                        "tokenizer_config.json, or name one of its tokens as SFT's eos_token")  # fmt: skip
    check_chat_template(tokenizer, model_name, "an instruction-tuned model or SFT's chat_template_path (a .jinja "
                        "file; SFT then RFT keeps it)")  # fmt: skip
    check_vocabulary(tokenizer, configured_vocabulary(model_name), model_name)
    if not takes_system_messages(tokenizer, options):
        log.warning(FOLDED.format(model=model_name))
        datasets = tuple(
            data if data is None else data.map(lambda row: {"prompt": fold_system(row["prompt"])}) for data in datasets
        )
    check_all_render(tokenizer, datasets, model_name, options)
    return datasets


def given_template(path: str) -> str:
    """The chat template SFT's ``chat_template_path`` names: a ``.jinja`` or ``.j2`` file's text, else the
    template of the tokenizer it names (TRL clones it)."""
    if Path(path).is_file() and path.endswith((".jinja", ".j2")):
        return Path(path).read_text(encoding="utf-8")
    return load_tokenizer(path).chat_template


def check_all_render(tokenizer: Any, datasets: tuple[Any, ...], template: str, options: dict | None = None) -> None:
    """Every example of the training data, then of the validation data, rendered once under RecTune's limits."""
    for position, data in enumerate(datasets):
        if data is not None:
            check_examples_render(tokenizer, data, template, "training" if position == 0 else "validation", options)
