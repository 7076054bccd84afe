"""What a local model or adapter folder must hold for RecTune to load it, checked before anything starts.

Model folders come from strangers (a checkpoint shared on the Hub, a colleague's copy) and are often
incomplete: a configuration that is no JSON, names an architecture this transformers lacks or needs the
folder's own Python; weights missing, in pickle files, cut short or shaped for another configuration. Left
to ``from_pretrained`` each is a traceback, in training after the output folder is claimed; here each is one
line naming the file.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from rectune.core.io import DataError, check_plain_files
from rectune.core.time_limit import time_limit
from rectune.models.weight_files import loaded_weight_files


def _header(path: Path) -> tuple[int, dict]:
    """A safetensors file's header length and its tensors (``{name: {"dtype", "shape", "data_offsets"}}``)."""
    with path.open("rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if path.stat().st_size < 8 + length or length > 100 << 20:
            raise EOFError
        header = json.loads(handle.read(length))
    return length, {name: entry for name, entry in header.items() if name != "__metadata__"}


def _tensors(path: Path) -> tuple[dict, str | None]:
    """A safetensors file's tensors, and why it is no whole safetensors file (cut short, a header that is no
    JSON) or None."""
    try:
        length, tensors = _header(path)
        size = 8 + length + max((entry["data_offsets"][1] for entry in tensors.values()), default=0)
    except EOFError:
        return {}, f"{path.name} is cut short"
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):  # TypeError: offsets that
        return {}, f"{path.name} has no readable safetensors header"  # are no numbers ("8", [0, 8]) cannot be summed
    if path.stat().st_size < size:
        return tensors, f"{path.name} is cut short"
    return tensors, _layout_problem(path)


def _layout_problem(path: Path) -> str | None:
    """What safetensors itself refuses in a header that parses (tensors' bytes overlapping or leaving gaps, a
    size unlike its shape and dtype): its error came as transformers loaded the weights, a traceback."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt"):
            return None
    except Exception as err:  # SafetensorError, a Rust library's own type
        return f"{path.name}: safetensors refuses it: {error_text(err)}"


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is no whole safetensors file (cut short, a header that is no JSON), or None."""
    return _tensors(path)[1]


def check_weights(folder: str | Path) -> dict[Path, dict]:
    """One line for a local model or adapter folder whose weights cannot be loaded safely or whole; else each
    safetensors file's tensors (none for a hub id or the embedded model: their loaders check them)."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    check_plain_files(folder)
    weights = sorted(folder.glob("*.safetensors"))
    if not weights and any(folder.glob("*.bin")):
        raise DataError(folder, "holds pickle weights (.bin) only; RecTune loads safetensors, which run no code")
    found = {}
    for path in weights:
        found[path], problem = _tensors(path)
        if problem:
            raise DataError(folder, problem)
    return found


def check_model_folder(folder: str | Path, variant: str | None = None) -> None:
    """One line for a local model folder (``config.json`` and weights) transformers could not load as a causal
    language model: its configuration or generation configuration unreadable, no weights, a tensor shaped
    unlike its configuration says, or weights it makes that the files it loads them from (with ``variant``,
    :mod:`rectune.models.weight_files`) lack (transformers would start them at random, with a warning among
    many). Adapter folders, hub ids and files are left to their loaders."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig, GenerationConfig

    folder = Path(folder)
    if not folder.is_dir():
        return
    check_plain_files(folder)  # before transformers opens a FIFO there and waits for ever
    if (folder / "adapter_config.json").is_file():
        return
    config_file = folder / "config.json"
    try:
        config = AutoConfig.from_pretrained(folder)  # trust_remote_code off: a config that needs it is refused
        if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
            raise ValueError(f"model_type {config.model_type!r} names no causal language model")
        text = config.get_text_config()  # raises where a configuration holds two text models (MusicGen's)
    except Exception as err:  # whatever transformers says of a configuration it cannot use
        raise DataError(config_file, f"not a configuration this transformers can load: {error_text(err)}") from None
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise DataError(folder, "holds no weights (no model.safetensors)")
    every = check_weights(folder)
    loaded, index = loaded_weight_files(folder, config, variant)
    headers = {path: every[path] for path in loaded}
    # Building the model costs about 1 ms a layer: a million layers would hold the run for a quarter of an hour.
    # Every layer has a weight of its own, so more layers than tensors is another model's configuration.
    layers, count = getattr(text, "num_hidden_layers", 0), sum(map(len, headers.values()))
    if isinstance(layers, int) and layers > count:
        raise DataError(
            config_file, f"num_hidden_layers is {layers}, but the weights hold {count} tensors in all (every layer "
            "has weights of its own): the configuration of another model?"
        )  # fmt: skip
    problem = config_value_problem(text)
    if problem:
        raise DataError(config_file, problem)
    try:
        model = on_meta_device(config)
    except Exception as err:
        raise DataError(config_file, f"not a configuration this transformers can load: {error_text(err)}") from None
    if (folder / "generation_config.json").is_file():
        try:  # transformers checks it as it loads the model: max_new_tokens -3 raises there
            GenerationConfig.from_pretrained(folder)
        except Exception as err:
            raise DataError(folder / "generation_config.json", f"transformers refuses it: {error_text(err)}") from None
    if getattr(config, "quantization_config", None):
        return  # packed weights: their names and shapes are the quantizer's, not the model's
    _check_tensors(folder, config_file, model, headers, f"{index.name}'s shards hold" if index else "holds", variant)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def config_value_problem(text: Any) -> str | None:
    """Why a model's text configuration (``config.get_text_config()``), one transformers accepts, cannot train or
    answer, or None: a dropout probability outside [0, 1] or not a number (training's first step raised), a
    normalisation epsilon negative or not finite or a rotary base of 0 or less (every output NaN), fewer than
    one layer. Only settings whose default is a number are read, so a flag named like them (ESM's
    ``token_dropout``) or one left unset by default is not."""
    try:
        defaults = vars(type(text)())
    except Exception:  # a configuration class that needs arguments: its values alone are read
        defaults = {}
    for key, value in vars(text).items():
        if not _is_number(value) and not _is_number(defaults.get(key)):
            continue
        shown = repr(value)[:60]
        if "dropout" in key or key.endswith("pdrop"):
            if not _is_number(value) or not 0 <= value <= 1:
                return f"{key} is {shown}: a dropout probability is a number from 0 to 1"
        elif key in ("eps", "epsilon") or key.endswith(("_eps", "_epsilon")):
            if not _is_number(value) or not 0 <= value < math.inf:
                return f"{key} is {shown}: a normalisation's epsilon is a finite number of at least 0 (else NaN)"
        elif key == "num_hidden_layers" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            return f"num_hidden_layers is {shown}: a model has at least one layer"
    for where, base in _rotary_bases(text):
        if not _is_number(base) or not 0 < base < math.inf:
            return f"{where} is {repr(base)[:60]}: a rotary base is a finite number above 0 (else NaN)"
    return None


def _rotary_bases(config: Any) -> list[tuple[str, Any]]:
    """Each ``rope_theta`` a configuration sets: at its top, in ``rope_parameters``, or in that per kind of layer
    (Gemma 3's full and sliding attention)."""
    found = [("rope_theta", config.rope_theta)] if "rope_theta" in vars(config) else []
    parameters = getattr(config, "rope_parameters", None)
    if not isinstance(parameters, dict):
        return found
    for kind, values in ({"": parameters} if "rope_theta" in parameters else parameters).items():
        if isinstance(values, dict) and "rope_theta" in values:
            found.append((f"rope_parameters{f'.{kind}' if kind else ''}.rope_theta", values["rope_theta"]))
    return found


def on_meta_device(config: Any) -> Any:
    """The causal language model ``config`` makes, on the meta device: its modules and shapes, no memory. The
    class itself, not ``from_config``, which DeepSpeed ZeRO-3 intercepts to partition."""
    import torch
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    with torch.device("meta"):
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)](config)


PATTERN_TIME_S = 10.0  # PEFT matches sane patterns against every module name of a 3B model in milliseconds


def check_adapter_patterns(model: Any, peft_config: Any, source: str | Path) -> Any:
    """Inject ``peft_config``'s layers into ``model`` (built on the meta device: no memory) within
    :data:`PATTERN_TIME_S`. PEFT matches its ``target_modules``, ``exclude_modules``, ``layers_pattern`` and rank
    and alpha patterns, regular expressions an adapter's or recipe's author wrote, against every module name;
    one that backtracks without end (``(.*)*x``) hung loading for hours. PEFT's own errors (no module matched)
    are left to the caller. Returns the PEFT model, on the meta device too."""
    from peft import get_peft_model

    with time_limit(PATTERN_TIME_S, f"{source}: PEFT's matching of its module patterns (target_modules, "
                    f"exclude_modules, rank_pattern, alpha_pattern) ran past {PATTERN_TIME_S:.0f} s: a regular "
                    "expression that backtracks without end?"):  # fmt: skip
        return get_peft_model(model, peft_config)


def learned_positions(model: Any) -> int | None:
    """How many positions a model with a learned table of absolute positions takes (GPT-2's ``wpe``, OPT's
    ``embed_positions``, two rows longer): one past them is an IndexError, a device-side assert on a GPU. None
    for rotary, ALiBi and other positions, which run on past the configuration's max_position_embeddings."""
    import torch

    limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    if not isinstance(limit, int):
        return None
    inputs = model.get_input_embeddings()
    tables = (m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m is not inputs)
    return limit if any(limit <= table.num_embeddings <= limit + 2 for table in tables) else None


LEARNED = "learned positions"


def context_positions(model: Any) -> tuple[int, str] | None:
    """How many positions a model's prompts and answers may take, and what sets them: a learned table's
    (:func:`learned_positions`), else the configured context, ``max_position_embeddings`` times a rope scaling
    ``factor`` above 1 (generous where the configuration counts the scaling in already). Rotary models run on
    past it, but a prompt far past it is no benchmark's (a release's megabyte query) and ran out of memory
    asking terabytes for its attention, blamed on the batch size. None where the configuration says nothing."""
    learned = learned_positions(model)
    if learned is not None:
        return learned, LEARNED
    config = model.config.get_text_config()
    limit = getattr(config, "max_position_embeddings", None)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        return None
    scaling = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and 1 < factor < 1e6:
        return int(limit * factor), f"context positions (max_position_embeddings {limit} x rope factor {factor})"
    return limit, "context positions (max_position_embeddings)"


def _check_tensors(
    folder: Path, config_file: Path, model: Any, headers: dict[Path, dict], holder: str, variant: str | None
) -> None:
    expected = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    prefix = model.base_model_prefix
    bare_expected = {_bare(name, prefix) for name in expected}
    present = set()
    for path, tensors in headers.items():
        for name, entry in tensors.items():
            if name in expected and entry.get("shape") != expected[name]:
                raise DataError(
                    path, f"{name} has shape {entry.get('shape')}; {config_file.name} makes it {expected[name]}"
                )
            present.add(_bare(name, prefix))
    if headers and not present & bare_expected:  # transformers would start every weight at random
        raise DataError(
            folder, f"none of its tensors is a weight of the {type(model).__name__} its {config_file.name} makes "
            f"(that names {next(iter(expected))!r}): the weights of another architecture?"
        )  # fmt: skip
    if present - bare_expected:  # names transformers renames as it loads (older or per-expert layouts), or not
        missing = _missing_as_loaded(folder, variant)
    else:
        missing = [names[0] for names in _parameter_names(model) if not {_bare(n, prefix) for n in names} & present]
        ignored = [re.compile(pattern) for pattern in model._keys_to_ignore_on_load_missing or ()]
        missing = [name for name in missing if not any(pattern.search(name) for pattern in ignored)]
    if missing:
        raise DataError(
            folder, f"{holder} no {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''} ({len(missing)} of the "
            f"{type(model).__name__}'s weights its {config_file.name} makes): transformers would start them at random"
        )  # fmt: skip


def _missing_as_loaded(folder: Path, variant: str | None) -> list[str]:
    """The weights transformers would start at random as it loads ``folder`` (built on the meta device: no
    weight is read), where its names are not all the model's: renamed ones it knows (``gamma`` for ``weight``)
    fill their weights; others (``lm_head.weight_old``, an older layout's ``rotary_emb.inv_freq``) fill none."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()  # its report of what it did not load: said here in one line
    transformers_logging.disable_progress_bar()
    try:
        _, loading = AutoModelForCausalLM.from_pretrained(
            folder, device_map="meta", output_loading_info=True, variant=variant
        )
    except Exception as err:
        raise DataError(folder, f"transformers cannot load it: {error_text(err)}") from None
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    return sorted(loading["missing_keys"])


def _parameter_names(model: Any) -> list[list[str]]:
    """Each parameter's names: a tied one (the output layer sharing the input embeddings) has several, and a
    checkpoint holds it under any one of them."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return list(names.values())


def _bare(name: str, prefix: str) -> str:
    """A weight's name without the base model's prefix, which checkpoints write or leave out."""
    return name.removeprefix(f"{prefix}.")


def error_text(err: Exception) -> str:
    """transformers' message, its first sentence where that says enough (the rest is advice on upgrading)."""
    text = " ".join(str(err).split())
    first = text.split(". ")[0]
    return (first if len(first) >= 40 else text)[:240] or type(err).__name__
