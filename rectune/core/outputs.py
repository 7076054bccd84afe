"""Output folders RecTune owns: built whole beside the target and swapped in, marked, refused when foreign.

Every output folder carries ``.rectune.json`` naming its kind and the entries RecTune wrote there;
a non-empty folder without it, or holding anything it does not list, belongs to someone else and is
never replaced without ``--overwrite``. One process at a time owns a folder (:mod:`rectune.core.locks`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rectune.core.file_modes import make_shareable
from rectune.core.io import TEMP_TAG, UMASK, RecTuneError, fault_point, write_json
from rectune.core.locks import hold_output_lock, output_lock
from rectune.core.output_paths import check_output_path


@contextlib.contextmanager
def staged_folder(target: str | os.PathLike, *, replace: bool) -> Iterator[Path]:
    """Yield a staging folder beside ``target``; on success it is swapped in as ``target``.

    For folders inside RecTune's own outputs (merged models, the model cache). An existing
    ``target`` is replaced when ``replace`` is true and kept otherwise (another process
    finished first); on any exception the staging folder is removed.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _recover(target)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-{os.getpid()}-", dir=target.parent))
    record = _swap_record(target)
    write_json(record, {"staging": staging.name, "old": None})
    os.chmod(staging, 0o777 & ~UMASK)
    try:
        yield staging
        make_shareable(staging)  # safetensors and tempfile create files 0600
        fault_point(f"swap:{target.name}")
        if target.exists() and not replace:
            shutil.rmtree(staging)
            return
        _swap(staging, target, record)
    except BaseException as err:
        _undo(record, target)  # the staging folder goes; a target already moved aside comes back
        if disk_full(err):
            raise RecTuneError(f"{target}: no space left on the device while writing it; nothing replaced") from None
        raise
    finally:
        record.unlink(missing_ok=True)


def disk_full(err: BaseException, where: str | os.PathLike | None = None) -> bool:
    """ENOSPC/EDQUOT, however the writer reports it (safetensors and tokenizers wrap it in their own errors).

    torch.save's writer drops the errno (``basic_ios::clear: iostream error``, ``unexpected pos 64 vs 0``): its
    RuntimeError counts where the file system holding ``where`` has no byte left to give.
    """
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)
    if "No space left on device" in text or "os error 28" in text or "Disk quota exceeded" in text:
        return True
    torch_writer = isinstance(err, RuntimeError) and any(part in text for part in _TORCH_WRITER_FAILURES)
    return torch_writer and where is not None and free_bytes(Path(where)) == 0


_TORCH_WRITER_FAILURES = ("iostream error", "inline_container.cc", "PytorchStreamWriter", "file write failed")


def free_bytes(path: Path) -> int | None:
    """The bytes this user may still write on the file system holding ``path`` (None: it cannot be asked)."""
    for folder in (path, *path.parents):
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            continue
    return None


MARKER = ".rectune.json"  # names the kind of output a folder is and the entries RecTune wrote into it


def claim_output(target: str | os.PathLike, kind: str, *, overwrite: bool) -> Path:
    """Own ``target`` for the rest of this process and check it may receive a ``kind`` output.

    Scripts call this first, so a refused or busy folder stops them before any work is done.
    """
    target = lock_output(target)
    check_output_folder(target, kind, overwrite=overwrite)
    return target


def lock_output(target: str | os.PathLike) -> Path:
    """Own the output path ``target`` for the rest of this process (see :mod:`rectune.core.locks`)."""
    target = Path(target)
    check_output_path(target)
    hold_output_lock(target)
    return target


@contextlib.contextmanager
def output_set(target: str | os.PathLike, kind: str, *, overwrite: bool = False, digest: bool = True) -> Iterator[Path]:
    """Build a whole output folder (a data set, a merged adapter) beside ``target``, then swap it in.

    Readers see the old set or the new one, never a mix. ``target`` may be missing, empty, or an
    earlier RecTune output of the same ``kind`` holding nothing else; anything else is refused
    unless ``overwrite`` (which replaces the folder and everything in it). ``digest``: as in
    :func:`write_marker`.
    """
    target = Path(target)
    check_output_path(target)
    with output_lock(target):
        check_output_folder(target, kind, overwrite=overwrite)
        with staged_folder(target, replace=True) as staging:
            yield staging
            write_marker(staging, kind, [entry.name for entry in staging.iterdir()], digest=digest)


def check_output_folder(target: Path, kind: str, *, overwrite: bool) -> None:
    """Refuse ``target`` unless it is missing, empty, or a RecTune ``kind`` output holding only what it listed."""
    check_output_path(target)
    _recover(target)
    if target.exists() and not target.is_dir():
        raise RecTuneError(f"{target}: is a file; the output must be a folder")
    if overwrite or not target.is_dir():
        return
    marker = read_marker(target)
    entries = {entry.name for entry in target.iterdir() if not _is_stray(entry.name, marker)} - {MARKER}
    if not entries:
        return
    if marker is None:
        raise RecTuneError(
            f"{target}: holds files RecTune did not write there ({_shown(entries)}; no {MARKER} says otherwise); "
            "choose another folder or pass --overwrite to replace it (a folder written by a RecTune version "
            "from before output folders were marked needs --overwrite once)"
        )
    if marker.get("kind") != kind:
        raise RecTuneError(
            f"{target}: holds a RecTune {marker.get('kind')} output, not a {kind} one; choose another "
            "folder or pass --overwrite to replace it"
        )
    foreign = set() if kind in OPEN_KINDS else entries - set(marker.get("entries", []))
    if foreign:
        raise RecTuneError(
            f"{target}: holds files RecTune did not write there ({_shown(foreign)}); choose another folder or "
            "pass --overwrite to replace it"
        )
    changed = changed_files(target, marker)
    if changed:
        raise RecTuneError(
            f"{target}: {changed[0]} changed since RecTune wrote it; choose another folder or pass --overwrite "
            "to replace it"
        )


def _shown(names: set[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:5]) + (f" and {len(ordered) - 5} more" if len(ordered) > 5 else "")


def read_marker(folder: Path) -> dict | None:
    """The folder's marker, or None where it has none of the shape RecTune writes (a folder from elsewhere can
    carry any file by that name: it then vouches for nothing, and the folder is refused as foreign)."""
    path = folder / MARKER
    if not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):  # ValueError: also a number past the digit limit
        return None
    if not isinstance(marker, dict) or not isinstance(marker.get("kind"), str):
        return None
    entries, files = marker.get("entries", []), marker.get("files", {})
    if not isinstance(entries, list) or not all(isinstance(entry, str) for entry in entries):
        return None
    return marker if isinstance(files, dict) else None


def write_marker(
    folder: Path,
    kind: str,
    entries: list[str],
    *,
    hashed: list[str] | None = None,
    digest: bool = True,
    vouched: dict[str, dict] | None = None,
) -> dict[str, dict]:
    """Mark ``folder`` as a ``kind`` output holding ``entries``, with the size, time and SHA-256 of each file
    under the ``hashed`` ones (default: all), so a rerun notices a file changed since. A run about to change
    its folder's files marks it with ``hashed=[]`` first: no file is vouched for until it is done.
    ``digest=False`` records size and time only (a model shape's random weights: GBs hashed for nothing),
    so any change to them, even one that leaves the bytes as they were, counts as a change. ``vouched``:
    files recorded by an earlier marker, kept as they were recorded then. Returns the files vouched for."""
    entries = sorted(set(entries) - {MARKER})
    files = dict(vouched or {})
    for name in entries if hashed is None else hashed:
        top = folder / name
        for path in [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []:
            if path.is_file() and not path.is_symlink():
                stat = path.stat()
                relative = path.relative_to(folder).as_posix()
                files[relative] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
                if digest:
                    files[relative]["sha256"] = sha256_of(path)
    write_json(folder / MARKER, {"kind": kind, "entries": entries, "files": files})
    return files


def changed_files(folder: Path, marker: dict) -> list[str]:
    """The files the marker vouches for that differ from what RecTune wrote (size and time, then SHA-256)."""
    files = marker.get("files") if isinstance(marker.get("files"), dict) else {}
    changed = []
    for relative, recorded in sorted(files.items()):
        path = folder / relative
        if not isinstance(recorded, dict) or not path.is_file() or path.is_symlink():
            continue  # removed since: nothing of the user's to lose
        stat = path.stat()
        if (stat.st_size, stat.st_mtime_ns) == (recorded.get("size"), recorded.get("mtime_ns")):
            continue
        if "sha256" not in recorded or sha256_of(path) != recorded["sha256"]:
            changed.append(relative)
    return changed


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


SWAP_RECORD = "rectune-swap"  # .NAME.rectune-swap-<pid>.json: the folders one swap of NAME made
OPEN_KINDS = {"training run"}  # the trainer names what it writes (checkpoints, logs): the whole folder is ours
_TEMPORARY = re.compile(rf"^\..+\.{re.escape(TEMP_TAG)}-\d+-[^/]+\.tmp$")  # io.atomic_write's own names


def _is_stray(name: str, marker: dict | None) -> bool:
    """A file or folder RecTune leaves while writing: a temporary file carrying its tag and process id, or
    a lock, staging or swapped-out folder of an entry the marker lists. A user's ``.notes.tmp`` is none."""
    if _TEMPORARY.match(name):
        return True
    listed = set(marker.get("entries", [])) | {MARKER} if marker else {MARKER}
    match = re.match(rf"^\.(.+)\.(?:lock|(?:staging|old)-\d+-[^/.]+|{SWAP_RECORD}-\d+\.json)$", name)
    return bool(match) and match.group(1) in listed


def _swap_record(target: Path) -> Path:
    """Where this process lists the exact names of the folders it makes beside ``target`` while swapping."""
    return target.parent / f".{target.name}.{SWAP_RECORD}-{os.getpid()}.json"


def _swap(staging: Path, target: Path, record: Path) -> None:
    """Rename ``staging`` to ``target``; an existing ``target`` is moved aside first and then removed.

    Killed between the two renames, the next run's :func:`_recover` puts the old folder back.
    """
    if not target.exists():
        os.replace(staging, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-{os.getpid()}-", dir=target.parent))
    write_json(record, {"staging": staging.name, "old": old.name})  # listed before it holds anything
    os.replace(target, old)
    fault_point(f"swapped-out:{target.name}")
    os.replace(staging, target)
    shutil.rmtree(old)


def _recover(target: Path) -> None:
    """Clean up after runs killed while building or swapping ``target``: only the folders a dead process
    listed by exact name in its swap record, never a name that merely looks like one (a user's
    ``.data.old-2024-01-05`` backup)."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.{SWAP_RECORD}-(\d+)\.json$")
    for entry in sorted(target.parent.iterdir()) if target.parent.is_dir() else ():
        match = pattern.match(entry.name)
        if not match or entry.is_symlink() or not entry.is_file() or _alive(int(match.group(1))):
            continue
        _undo(entry, target)


def _undo(record: Path, target: Path) -> None:
    """Remove the staging folder ``record`` lists and put back the old ``target`` it moved aside (when the
    new one never arrived), then the record; a file that is no record of ours is left alone."""
    listed = _listed(record, target)
    if listed is None:
        return
    staging, old = (target.parent / name if name else None for name in listed)
    if old is not None and old.is_dir() and not old.is_symlink():
        if not target.exists():
            os.replace(old, target)  # killed mid-swap: the old set is still whole
        else:
            shutil.rmtree(old)
    if staging is not None and staging.is_dir() and not staging.is_symlink():
        shutil.rmtree(staging, ignore_errors=True)
    record.unlink(missing_ok=True)


def _listed(record: Path, target: Path) -> tuple[str | None, str | None] | None:
    """The (staging, old) names a swap record lists, when it is one: names beside ``target`` made by mkdtemp."""
    try:
        names = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(names, dict) or set(names) != {"staging", "old"}:
        return None
    for kind in ("staging", "old"):
        name = names[kind]
        if name is not None and not (isinstance(name, str) and name.startswith(f".{target.name}.{kind}-")):
            return None
        if name is not None and ("/" in name or name in (".", "..")):
            return None
    return names["staging"], names["old"]


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, but another user's
    return True
