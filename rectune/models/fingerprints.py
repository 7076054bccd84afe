"""What decides a model's outputs, as hashes of its files: a rerun, a resume or a cached evaluation compares
these, not paths, since a folder may be rewritten in place (an adapter retrained, a merge saved again)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def adapter_fingerprint(adapter_dir: str | Path) -> str:
    """SHA-256 over the adapter's config and weights: changes whenever the adapter is retrained."""
    names = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
    return _digest([Path(adapter_dir) / name for name in names if (Path(adapter_dir) / name).is_file()])


def model_fingerprint(model_dir: str | Path) -> str:
    """SHA-256 over a local model folder's files (weights, configuration, tokenizer), its card and hidden
    files (RecTune's records) left out: changes whenever the model is rewritten."""
    return _digest(_model_files(model_dir))


def model_record(model_dir: str | Path, earlier: object = None) -> dict:
    """``{"files": ["NAME SIZE MTIME_NS", ...], "sha256": model_fingerprint}`` of a local model folder.

    ``earlier``'s hash is reused when every file's size and modification time match it, so a resume does not
    read a 3B model's 6 GB again; a copy elsewhere (new times, the same bytes) is hashed and matches.
    """
    files = []
    for path in _model_files(model_dir):
        stat = path.stat()
        name = os.fsencode(path.name).decode("utf-8", "backslashreplace")  # a name of no UTF-8: started.json holds it
        files.append(f"{name} {stat.st_size} {stat.st_mtime_ns}")
    if isinstance(earlier, dict) and earlier.get("files") == files and isinstance(earlier.get("sha256"), str):
        return {"files": files, "sha256": earlier["sha256"]}
    return {"files": files, "sha256": model_fingerprint(model_dir)}


def _model_files(model_dir: str | Path) -> list[Path]:
    files = sorted(Path(model_dir).iterdir())
    return [p for p in files if p.is_file() and not p.name.startswith(".") and p.name != "README.md"]


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(os.fsencode(path.name))  # the same bytes as .encode() for a UTF-8 name; any name else
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
