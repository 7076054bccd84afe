"""What a local model or adapter folder must hold for RecTune to load it, checked before anything starts.

Model folders come from strangers (a checkpoint shared on the Hub, a colleague's copy) and are often
incomplete: a configuration that is no JSON, names an architecture this transformers lacks or needs the
folder's own Python; weights missing, in pickle files, cut short or shaped for another configuration. Left
to ``from_pretrained`` each is a traceback, in training after the output folder is claimed; here each is one
line naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path

from rectune.core.io import DataError


def _header(path: Path) -> tuple[int, dict]:
    """A safetensors file's header length and its tensors (``{name: {"dtype", "shape", "data_offsets"}}``)."""
    with path.open("rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if path.stat().st_size < 8 + length or length > 100 << 20:
            raise EOFError
        header = json.loads(handle.read(length))
    return length, {name: entry for name, entry in header.items() if name != "__metadata__"}


def safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is no whole safetensors file (cut short, a header that is no JSON), or None."""
    try:
        length, tensors = _header(path)
        ends = [entry["data_offsets"][1] for entry in tensors.values()]
    except EOFError:
        return f"{path.name} is cut short"
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return f"{path.name} has no readable safetensors header"
    return f"{path.name} is cut short" if path.stat().st_size < 8 + length + max(ends, default=0) else None


def check_weights(folder: str | Path) -> None:
    """One line for a local model or adapter folder whose weights cannot be loaded safely or whole."""
    folder = Path(folder)
    if not folder.is_dir():
        return  # a hub id or the embedded model: their loaders check them
    weights = sorted(folder.glob("*.safetensors"))
    if not weights and any(folder.glob("*.bin")):
        raise DataError(folder, "holds pickle weights (.bin) only; RecTune loads safetensors, which run no code")
    problem = next((found for found in map(safetensors_problem, weights) if found), None)
    if problem:
        raise DataError(folder, problem)


def check_model_folder(folder: str | Path) -> None:
    """One line for a local model folder (``config.json`` and weights) transformers could not load as a causal
    language model: its configuration or generation configuration unreadable, no weights, or a tensor shaped
    unlike its configuration says.
    Adapter folders, hub ids and files are left to their loaders."""
    import torch
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig, GenerationConfig

    folder = Path(folder)
    if not folder.is_dir() or (folder / "adapter_config.json").is_file():
        return
    config_file = folder / "config.json"
    try:
        config = AutoConfig.from_pretrained(folder)  # trust_remote_code off: a config that needs it is refused
        if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
            raise ValueError(f"model_type {config.model_type!r} names no causal language model")
        # shapes only, on no memory; the class itself, as from_config under DeepSpeed ZeRO-3 would partition it
        with torch.device("meta"):
            model = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)](config)
    except Exception as err:  # whatever transformers says of a configuration it cannot use
        raise DataError(config_file, f"not a configuration this transformers can load: {error_text(err)}") from None
    expected = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    bare_expected = {_bare(name, model.base_model_prefix) for name in expected}
    if (folder / "generation_config.json").is_file():
        try:  # transformers checks it as it loads the model: max_new_tokens -3 raises there
            GenerationConfig.from_pretrained(folder)
        except Exception as err:
            raise DataError(folder / "generation_config.json", f"transformers refuses it: {error_text(err)}") from None
    weights = sorted(folder.glob("*.safetensors"))
    if not weights and not any(folder.glob("*.bin")):
        raise DataError(folder, "holds no weights (no model.safetensors)")
    check_weights(folder)
    found = 0
    for path in weights:
        for name, entry in _header(path)[1].items():
            if name in expected and entry.get("shape") != expected[name]:
                raise DataError(
                    path, f"{name} has shape {entry.get('shape')}; {config_file.name} makes it {expected[name]}"
                )
            found += _bare(name, model.base_model_prefix) in bare_expected
    if weights and not found:  # transformers would start every weight at random, with a warning among many
        raise DataError(
            folder, f"none of its tensors is a weight of the {type(model).__name__} its {config_file.name} makes "
            f"(that names {next(iter(expected))!r}): the weights of another architecture?"
        )  # fmt: skip


def _bare(name: str, prefix: str) -> str:
    """A weight's name without the base model's prefix, which checkpoints write or leave out."""
    return name.removeprefix(f"{prefix}.")


def error_text(err: Exception) -> str:
    """transformers' message, its first sentence where that says enough (the rest is advice on upgrading)."""
    text = " ".join(str(err).split())
    first = text.split(". ")[0]
    return (first if len(first) >= 40 else text)[:240] or type(err).__name__
