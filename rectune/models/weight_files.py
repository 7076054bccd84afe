"""The safetensors files transformers loads a local model folder's weights from, chosen as it chooses them.

A folder's checks read these files' headers, not every ``*.safetensors`` there. transformers takes the file
``config.json``'s ``transformers_weights`` names, else ``model.safetensors``, else the shards
``model.safetensors.index.json`` maps the weights to, and nothing else: a shard the index leaves out is never read
(its weights started at random, and the run went on), and the index's names are joined to the folder as given, so
``../x.safetensors`` or ``/dev/zero`` was read from outside it (the second filled memory until the kernel killed
the run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rectune.core.io import DataError, read_json_object

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"


def with_variant(name: str, variant: str | None) -> str:
    """``name`` as a ``variant`` of the weights (``model.fp16.safetensors``), as transformers names it."""
    if variant is None:
        return name
    stem, suffix = name.rsplit(".", 1)
    return f"{stem}.{variant}.{suffix}"


def loaded_weight_files(folder: Path, config: Any, variant: str | None = None) -> tuple[list[Path], Path | None]:
    """The safetensors files ``from_pretrained`` loads from ``folder`` (with ``model_init_kwargs``' ``variant``),
    and the index naming them (None: one file); one line where it would load none, pickle weights, or a file
    outside the folder."""
    named = getattr(config, "transformers_weights", None)
    if named is not None:
        if not isinstance(named, str) or not _file_name(named, (".safetensors", ".safetensors.index.json")):
            raise DataError(folder / "config.json", f"transformers_weights is {str(named)[:80]!r}: it must name a "
                            ".safetensors file (or its .index.json) in the folder")  # fmt: skip
        chosen = folder / named
    else:
        single, index = folder / with_variant(WEIGHTS_NAME, variant), folder / with_variant(INDEX_NAME, variant)
        chosen = index if index.is_file() and not single.is_file() else single
    if not chosen.is_file():
        present = sorted(path.name for path in folder.glob("*.safetensors"))
        holds = f"its weights are named {', '.join(present[:3])}" if present else "it holds no safetensors weights"
        raise DataError(folder, f"holds no {chosen.name}, which transformers loads the weights from ({holds})")
    if not chosen.name.endswith(".index.json"):
        return [chosen], None
    return [folder / shard for shard in _shards(chosen)], chosen


def _shards(index: Path) -> list[str]:
    """The shard files an index maps the weights to: names of safetensors files beside it, each there."""
    weight_map = read_json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise DataError(index, "field 'weight_map': must map each weight's name to the file holding it")
    shards = sorted({str(shard) for shard in weight_map.values()})
    for shard in shards:
        if not _file_name(shard, (".safetensors",)):
            raise DataError(index, f"field 'weight_map': {shard[:80]!r} is not the name of a .safetensors file "
                            "in the folder")  # fmt: skip
        if not (index.parent / shard).is_file():
            raise DataError(index, f"field 'weight_map': names {shard}, which the folder does not hold")
    return shards


def _file_name(name: str, suffixes: tuple[str, ...]) -> bool:
    """Whether ``name`` is a bare file name with one of ``suffixes`` (no folder part, no ``..``), not hidden:
    hidden files are RecTune's records, which a model's fingerprint (its evaluation cache key) leaves out."""
    plain = Path(name).name == name and not name.startswith(".") and not {"\\", "\0"} & set(name)
    return plain and name.endswith(suffixes)
