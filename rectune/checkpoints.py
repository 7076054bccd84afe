"""Find out what a checkpoint path is and load it for generation.

Kinds: ``embedded`` (``embedded:smollm2``), ``model`` (a hub id or a folder with
``config.json``: a base, merged or fully fine-tuned model), ``adapter`` (a PEFT folder; its
base comes from ``adapter_config.json``) and ``run`` (``outputs/<run>`` holding stage folders
``sft``, ``rft``, ``sft_rft``: the stage given, else the one trained last).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rectune.io import DataError, read_json
from rectune.models import EMBEDDED, resolve_model_name

log = logging.getLogger(__name__)
STAGES = ("sft", "rft", "sft_rft")


@dataclass
class Checkpoint:
    kind: str
    path: str
    base_model: str
    adapter: str | None = None

    def describe(self) -> dict:
        return {"checkpoint": self.path, "kind": self.kind, "base_model": self.base_model, "adapter": self.adapter}

    def identity(self) -> str:
        """What decides its outputs: the base model and the adapter's weights (not where it lies)."""
        adapter = f" + adapter {adapter_fingerprint(self.adapter)}" if self.adapter else ""
        return f"{self.base_model}{adapter}"


def adapter_fingerprint(adapter_dir: str | Path) -> str:
    """SHA-256 over the adapter's config and weights: changes whenever the adapter is retrained."""
    adapter_dir = Path(adapter_dir)
    digest = hashlib.sha256()
    for name in ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin"):
        path = adapter_dir / name
        if path.is_file():
            digest.update(name.encode())
            with path.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def adapter_base(adapter: str | Path) -> str:
    """The base model a PEFT adapter folder names in its ``adapter_config.json``."""
    config = Path(adapter) / "adapter_config.json"
    if not config.is_file():
        raise DataError(adapter, "not a PEFT adapter folder (no adapter_config.json)")
    base = read_json(config).get("base_model_name_or_path")
    if not base:
        raise DataError(config, "field 'base_model_name_or_path': missing")
    return base


def resolve_checkpoint(name: str, stage: str | None = None) -> Checkpoint:
    if name.startswith("embedded:"):
        return Checkpoint("embedded", name, resolve_model_name(name))
    path = Path(name)
    if not path.exists():
        if name.count("/") == 1 and not name.startswith((".", "/")):
            return Checkpoint("model", name, name)  # a hub id: loads from the local cache
        raise DataError(
            path, f"checkpoint not found (a model folder, a PEFT adapter folder, a run folder or {EMBEDDED})"
        )
    stages = [s for s in STAGES if (path / s / "adapter_config.json").is_file()]
    if stages:
        if stage is None:
            stage = max(stages, key=lambda s: (path / s / "adapter_config.json").stat().st_mtime)
            log.info("run folder %s: evaluating stage %r (trained last; name a stage to pick another)", path, stage)
        elif stage not in stages:
            raise DataError(path, f"run folder has no stage {stage!r} (it has {', '.join(stages)})")
        inner = resolve_checkpoint(str(path / stage))
        return Checkpoint("run", str(path), inner.base_model, inner.adapter)
    if (path / "adapter_config.json").is_file():
        base = adapter_base(path)
        if base.startswith("/") and not Path(base).exists():
            raise DataError(path / "adapter_config.json", f"the adapter's base model {base} does not exist here")
        return Checkpoint("adapter", str(path), base, str(path))
    if (path / "config.json").is_file():
        return Checkpoint("model", str(path), str(path))
    raise DataError(
        path,
        "not a model folder (config.json), a PEFT adapter (adapter_config.json) or a run folder "
        f"(stages {', '.join(STAGES)})",
    )


def load_for_generation(checkpoint: Checkpoint, dtype: torch.dtype | None = None) -> tuple[Any, Any]:
    """Model (adapter merged in, eval mode) and a left-padding tokenizer; bf16 on GPUs that have it
    unless ``dtype`` says otherwise, else fp32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype is None:
        dtype = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32
    model = AutoModelForCausalLM.from_pretrained(checkpoint.base_model, dtype=dtype)
    tokenizer_source = checkpoint.base_model
    if checkpoint.adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, checkpoint.adapter).merge_and_unload()
        if (Path(checkpoint.adapter) / "tokenizer_config.json").is_file():
            tokenizer_source = checkpoint.adapter
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model.eval(), tokenizer
