"""Recipes: YAML files of training arguments, read through TRL's parser, checked, and saved back.

A recipe is a YAML mapping read through TRL's ``TrlParser``: every key is a field of one
of the script's argument dataclasses (TRL's ``SFTConfig``/``GRPOConfig``, ``ModelConfig``
and ``DatasetMixtureConfig``, plus RecTune's own below), CLI flags override the file, and
an unknown key is an error naming the key and the file. A recipe is data: it cannot set the
environment or hold a secret (nor run code or upload: ``recipe_trust``), and secrets given to a run
never reach the saved recipe.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml

from rectune.core.cli import check_utf8_arguments, expand_home, run
from rectune.core.io import DataError, RecTuneError, require_file
from rectune.training.arguments import RunArguments
from rectune.training.cpu_precision import bf16_asked, cpu_has_bfloat16, cpu_precision
from rectune.training.model_init_kwargs import check_model_init, keep_dtype_given
from rectune.training.recipe_trust import LEFT_OUT_OF_SAVED_RECIPES, announce_code, refuse_untrusted
from rectune.training.recipe_types import check_types
from rectune.training.recipe_values import check_values, expand_home_paths, keep_target_modules_listed
from rectune.training.recipe_yaml import check_recipe_yaml

log = logging.getLogger(__name__)


def parse_recipe(dataclass_types: tuple[type, ...], argv: list[str] | None = None) -> tuple[Any, ...]:
    """Parse ``RECIPE.yaml [--flag value ...]`` into the dataclasses, checking the recipe first.

    Returns the dataclass instances in order, then the recipe path (or None).
    """
    from trl import TrlParser

    args = expand_home(sys.argv[1:] if argv is None else argv)
    check_utf8_arguments(args)
    if "-h" in args or "--help" in args:
        print(short_help(dataclass_types))
        sys.exit(0)
    args = ["--help" if arg == "--help-all" else arg for arg in args]
    recipe, args = recipe_argument(args)
    config = {}
    _check_flags(args, dataclass_types)
    given = _flag_names(args)  # typed on the command line, where a refusal of their values points
    if recipe is not None:
        config = _check_recipe(recipe, dataclass_types)
        args = ["--config", str(recipe), *args]
    secrets = _take_secrets(args)
    import torch  # here, not at the top: --help answers before torch loads

    device = []  # (the recipe alone is parsed with them again where a refusal needs telling apart)
    if not torch.cuda.is_available():
        # No GPU: fp32 unless bf16 is asked and computed natively (cpu_precision), use_cpu (else torchrun's workers
        # run alone, not MULTI_CPU)
        settings, why = cpu_precision(bf16_asked(args, config), cpu_has_bfloat16())
        if argv is None:  # the script's own parse; resolved_recipe parses the same command line again
            log.info("no CUDA device: %s", why)
        device = [arg for key, value in settings.items() for arg in (f"--{key}", str(value).lower())]
    args += device
    parser = TrlParser(dataclass_types)
    parser.error = lambda message: _refuse_argument(message, recipe, given)  # not argparse's usage of 300 flags
    _check_choices(parser, config, recipe)
    if recipe is not None:
        check_types(config, dataclass_types, recipe)  # argparse takes a recipe's non-string values as they are
    try:
        parsed = parser.parse_args_and_config(args)
    except RecTuneError:
        raise
    except (ValueError, TypeError, ZeroDivisionError, OverflowError, OSError) as err:  # unused arguments, values
        # the configs' own checks refuse, files: the command line's doing where the recipe alone parses
        typed = recipe is None or (given and _parses(dataclass_types, ["--config", str(recipe), *device]))
        raise RecTuneError(f"{'command line' if typed else recipe}: {err}") from None
    check_values(parsed, recipe or "command line", given, given | set(config))
    check_model_init(parsed, "command line" if recipe is None or "model_init_kwargs" in given else recipe)
    keep_target_modules_listed(parsed)
    expand_home_paths(parsed)
    keep_dtype_given(parsed, given | set(config))
    for item in parsed:
        if getattr(item, "enable_jit_checkpoint", False):  # its handler decides on each process alone
            log.info("enable_jit_checkpoint: RecTune's own checkpoint on SIGTERM takes its place")
            item.enable_jit_checkpoint = False
        if isinstance(item, RunArguments) and item.recipe_name is None:
            item.recipe_name = recipe.stem if recipe else "run"
        secret = set(getattr(item, "model_init_kwargs", None) or {}) & set(SECRET_KWARGS)
        if secret:  # the trainer would pickle it into training_args.bin
            raise RecTuneError(f"model_init_kwargs: {sorted(secret)[0]!r} would be saved with the run; use HF_TOKEN")
    if argv is None:
        _use_secrets(secrets)
        announce_code(parsed)
    return (*parsed, recipe)


# Arguments that hold credentials. Transformers pickles its arguments into training_args.bin (in the run
# folder and every checkpoint, which push_to_hub uploads) and W&B records the command line, so a secret
# never stays in either: the Hub token moves to this process's HF_TOKEN, where huggingface_hub finds it.
SECRETS = {"hub_token": "HF_TOKEN"}
SECRET_KWARGS = ("token", "use_auth_token", "api_key", "hub_token")  # inside model_init_kwargs and the like


def _take_secrets(args: list[str]) -> dict[str, str]:
    """Remove ``--hub_token VALUE`` (or ``=VALUE``) from ``args`` and from ``sys.argv``; return the values."""
    found: dict[str, str] = {}
    for source in (args, sys.argv):
        index = 0
        while index < len(source):
            flag, equals, value = source[index].partition("=")
            name = flag.removeprefix("--").replace("-", "_")  # HfArgumentParser takes --hub-token too
            if not flag.startswith("--") or name not in SECRETS:
                index += 1
                continue
            if not equals:
                if index + 1 >= len(source):
                    raise RecTuneError(f"--{name} needs a value")
                value = source[index + 1]
                del source[index + 1]
            del source[index]
            found[name] = value
    return found


def _use_secrets(secrets: dict[str, str]) -> None:
    for name, value in secrets.items():
        os.environ[SECRETS[name]] = value  # this process and its children only; never written anywhere


def recipe_argument(args: list[str]) -> tuple[Path | None, list[str]]:
    """The recipe a command line names (first, or after ``--config``), and the arguments without it."""
    if args and not args[0].startswith("-"):
        return Path(args[0]), args[1:]
    if "--config" in args:
        index = args.index("--config")
        if index + 1 == len(args):
            raise RecTuneError("--config needs a recipe file (RECIPE.yaml)")
        return Path(args[index + 1]), args[:index] + args[index + 2 :]
    return None, args


def answer_early(own: tuple[type, ...]) -> None:
    """What a script answers before it imports TRL and torch (a second, not ten): the short help, listing
    ``own`` (RecTune's arguments) and pointing at ``--help-all``; and the one line for a recipe that is missing,
    not YAML or asks what no recipe may (:func:`read_recipe`). :func:`parse_recipe` reads it again, whole."""
    if "-h" in sys.argv[1:] or "--help" in sys.argv[1:]:
        print(short_help(own))
        sys.exit(0)

    def read_given_recipe() -> None:
        recipe, _ = recipe_argument(sys.argv[1:])
        if recipe is not None:
            read_recipe(recipe)

    run(read_given_recipe)


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
        if not kind.__module__.startswith("rectune."):  # TRL's own: --help-all
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


def _check_recipe(recipe: Path, dataclass_types: tuple[type, ...]) -> dict[str, Any]:
    config = read_recipe(recipe)
    allowed = {f.name for t in dataclass_types for f in dataclasses.fields(t)}
    for key in config:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            names = ", ".join(t.__name__ for t in dataclass_types)
            raise DataError(recipe, f"unknown key {key!r} (not a field of {names}){hint}")
    return config


def read_recipe(recipe: Path) -> dict[str, Any]:
    """A recipe's mapping, refused in one line where it is no UTF-8 YAML mapping, or sets the environment, holds a
    secret or asks for what :mod:`rectune.training.recipe_trust` refuses."""
    require_file(recipe, "recipe file not found")
    try:
        text = recipe.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(recipe, f"not UTF-8 text (byte {err.start + 1})") from None
    try:
        check_recipe_yaml(recipe, text)
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise DataError(recipe, f"malformed YAML: {err}") from None
    except (ValueError, RecursionError) as err:  # a number past Python's digit limit; nesting past its stack
        if isinstance(err, DataError):  # a refusal of the checks above, which names its line
            raise
        raise DataError(recipe, f"malformed YAML: {str(err)[:200] or 'nested too deeply'}") from None
    if not isinstance(config, dict):
        raise DataError(recipe, "a recipe must be a YAML mapping of argument names to values")
    if "env" in config:
        # TRL copies a recipe's env: into os.environ over the user's own settings: a shared recipe could
        # point W&B at another server with the user's key, or make git run a command
        raise DataError(recipe, "key 'env': a recipe cannot set environment variables; set them in your shell")
    for key, value in config.items():
        refuse_untrusted(recipe, key, value)
        if key in SECRETS:
            raise DataError(
                recipe, f"key {key!r}: a recipe cannot hold a secret; pass --{key} or set {SECRETS[key]} in your shell"
            )
        if isinstance(value, dict) and set(value) & set(SECRET_KWARGS):
            secret = sorted(set(value) & set(SECRET_KWARGS))[0]
            raise DataError(recipe, f"key {key!r}: a recipe cannot hold a secret ({secret!r}); use `hf auth login`")
    return config


def _check_choices(parser: Any, config: dict[str, Any], recipe: Path | None) -> None:
    """A recipe's value for a field with fixed choices must be one of them: argparse checks the command line's
    values only, and takes a recipe's (its defaults) as they are."""
    for action in parser._actions:
        value = config.get(action.dest)
        if action.choices and value is not None and str(value) not in {str(choice) for choice in action.choices}:
            choices = ", ".join(str(choice) for choice in action.choices)
            # YAML 1.1 reads an unquoted no, off, yes or on as a boolean
            hint = " (YAML reads an unquoted no or yes as a boolean: quote the word)" if isinstance(value, bool) else ""
            raise DataError(recipe, f"key {action.dest!r}: {value!r} is not one of {choices}{hint}")


def _check_flags(args: list[str], dataclass_types: tuple[type, ...]) -> None:
    """An unknown ``--flag`` stops here in one line naming it and the closest field (as a recipe key does)."""
    allowed = {f.name for t in dataclass_types for f in dataclasses.fields(t)} | {"config"}
    for arg in args:
        if not arg.startswith("--") or arg == "--help":
            continue
        name = arg[2:].split("=", 1)[0].replace("-", "_")
        if name in allowed or (name.startswith("no_") and name[3:] in allowed):
            continue
        close = difflib.get_close_matches(name, allowed, n=1)
        hint = f"; did you mean --{close[0]}?" if close else " (train/sft.py --help-all lists every flag)"
        raise RecTuneError(
            f"unknown flag --{name} (not a field of {', '.join(t.__name__ for t in dataclass_types)}){hint}"
        )


def _parses(dataclass_types: tuple[type, ...], args: list[str]) -> bool:
    """Whether ``args`` parse into the configs without a refusal (argparse's own included, without its usage)."""
    from trl import TrlParser

    def refuse(message: str) -> NoReturn:
        raise ValueError(message)

    parser = TrlParser(dataclass_types)
    parser.error = refuse
    try:
        parser.parse_args_and_config(args)
    except (ValueError, TypeError, ZeroDivisionError, OverflowError, OSError):
        return False
    return True


def where_set(key: str, recipe: Path | None) -> str:
    """Where a run's value of ``key`` came from, for a refusal to name: the command line when typed there."""
    return "command line" if recipe is None or key in _flag_names(sys.argv[1:]) else str(recipe)


def _flag_names(args: list[str]) -> frozenset[str]:
    """The fields a command line sets (``--learning-rate=1e-4`` sets ``learning_rate``)."""
    return frozenset(arg[2:].split("=", 1)[0].replace("-", "_") for arg in args if arg.startswith("--"))


def _refuse_argument(message: str, recipe: Path | None, given: frozenset[str]) -> NoReturn:
    """argparse's own refusal (a value of the wrong type, a flag without its value) as one line naming the key
    and where it was given: argparse would print its usage of every TRL and transformers flag first."""
    match = re.match(r"argument --(\w+)[^:]*: (.*)", message)
    if match is None:
        raise RecTuneError(f"{recipe or 'command line'}: {message}")
    name, problem = match.groups()
    if name in given or recipe is None:
        raise RecTuneError(f"command line: --{name}: {problem}")
    raise RecTuneError(f"{recipe}: key {name!r}: {problem}")


def _plain(value: Any) -> Any:
    def encode(item: Any) -> Any:
        return dataclasses.asdict(item) if dataclasses.is_dataclass(item) else str(item)

    return json.loads(json.dumps(value, default=encode))


def resolved_recipe(dataclass_types: tuple[type, ...], argv: list[str] | None = None) -> dict[str, Any]:
    """The recipe a run used: the recipe file with the command line's flags applied (as parsed).

    Defaults are left out, so values that TRL derives from others (GRPO's generation batch size) are
    derived again on rerun, and so are RecTune's device settings (fp32 and ``use_cpu`` without a GPU).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    *parsed, recipe = parse_recipe(dataclass_types, args)
    values = dict(yaml.safe_load(recipe.read_text(encoding="utf-8")) or {}) if recipe else {}
    flags = _flag_names(args)  # --learning-rate is --learning_rate: argparse takes both spellings
    for config in parsed:
        for item in dataclasses.fields(config):
            if item.name in flags or f"no_{item.name}" in flags:  # --no_X sets a switch that defaults on
                values[item.name] = _plain(getattr(config, item.name))
    if values.get("train_data"):
        values.pop("datasets", None)  # --train_data replaced them: the recipe names the data trained on
    return {key: value for key, value in values.items() if key not in (*SECRETS, *LEFT_OUT_OF_SAVED_RECIPES)}
