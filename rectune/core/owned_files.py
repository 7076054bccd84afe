"""Single files RecTune writes among a user's own (score reports, comparison tables and charts).

A file is replaced only when RecTune wrote it: the folder's ``.rectune-files.json`` records each file
RecTune wrote there with its SHA-256, and a file that is not recorded, or was changed since, is the
user's and is refused unless ``--overwrite``. One process at a time writes a folder's files.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from rectune.core.io import RecTuneError, write_json
from rectune.core.locks import output_lock
from rectune.core.output_paths import check_output_path
from rectune.core.outputs import sha256_of

MANIFEST = ".rectune-files.json"


@contextlib.contextmanager
def file_outputs(paths: list[Path], *, overwrite: bool) -> Iterator[None]:
    """Check ``paths`` may be written, hold their folders while the block writes them, then record them."""
    folders = sorted({path.parent for path in paths})
    for path in paths:
        check_output_path(path)  # before the locks make the folders (mkdir under a link to nothing was a traceback)
    with contextlib.ExitStack() as stack:
        for folder in folders:
            stack.enter_context(output_lock(folder / MANIFEST))
        for path in paths:
            check_file_output(path, overwrite=overwrite)
        before = {path: _stamp(path) for path in paths}
        try:
            yield
        finally:  # also when the block fails half-way: what it wrote is ours, so a rerun may replace it
            for folder in folders:
                written = [p for p in paths if p.parent == folder and p.is_file() and _stamp(p) != before[p]]
                if written:
                    _record(folder, written)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells a file rewritten (renamed over) from the one that was there."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return found.st_ino, found.st_mtime_ns, found.st_size


def check_file_output(path: Path, *, overwrite: bool) -> None:
    check_output_path(path)
    if path.is_dir():
        raise RecTuneError(f"{path}: is a folder; name a file to write")
    if path.exists() and not overwrite and not _written_by_rectune(path):
        raise RecTuneError(
            f"{path}: exists and RecTune did not write it (or it changed since); choose another name or pass "
            "--overwrite to replace it"
        )


def _written_by_rectune(path: Path) -> bool:
    return _manifest(path.parent).get(path.name) == sha256_of(path)


def _record(folder: Path, written: list[Path]) -> None:
    entries = _manifest(folder)
    entries.update({path.name: sha256_of(path) for path in written})
    write_json(folder / MANIFEST, dict(sorted(entries.items())))


def _manifest(folder: Path) -> dict[str, str]:
    path = folder / MANIFEST
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError, RecursionError):
        return {}  # unreadable: nothing counts as ours, so nothing is replaced
    return {k: v for k, v in entries.items() if isinstance(v, str)} if isinstance(entries, dict) else {}


def output_paths(prefix: str | os.PathLike, suffixes: tuple[str, ...]) -> list[Path]:
    """``PREFIX.md``, ``PREFIX.csv``...: the name as given (``run_v1.2`` stays ``run_v1.2.md``); a prefix
    already ending in one of the suffixes loses it first. A folder is no prefix: its files would land beside it."""
    prefix = Path(prefix)
    if prefix.is_dir():
        raise RecTuneError(f"{prefix}: is a folder; name the files' prefix, such as {prefix / 'comparison'}")
    if prefix.suffix in suffixes:
        prefix = prefix.with_suffix("")
    return [prefix.with_name(prefix.name + suffix) for suffix in suffixes]
