"""File reading and writing that fails loudly and never leaves half-written outputs."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


class RecTuneError(ValueError):
    """A user error (bad input, bad setting): the scripts print it as one line; anything else is a bug."""


class DataError(RecTuneError):
    """Bad input: the message names the file and, where known, the line and field."""

    def __init__(self, path: str | os.PathLike, message: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Open a temporary file beside ``path`` and rename it over ``path`` on success.

    On any exception the temporary file is removed, so readers never see a partial output.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 would make shared outputs unreadable to others
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
        os.replace(tmp, path)
        fault_point(f"wrote:{path.name}")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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
    os.chmod(staging, 0o777 & ~_UMASK)
    try:
        yield staging
        fault_point(f"swap:{target.name}")
        if target.exists() and not replace:
            shutil.rmtree(staging)
            return
        _swap(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


MARKER = ".rectune.json"  # names the kind of output a folder is and the entries RecTune wrote into it


@contextlib.contextmanager
def output_set(
    target: str | os.PathLike, kind: str, *, overwrite: bool = False, writes: tuple[str, ...] = ()
) -> Iterator[Path]:
    """Build a whole output folder (a data set, a merged adapter) beside ``target``, then swap it in.

    Readers see the old set or the new one, never a mix. ``target`` may be missing, empty, or an
    earlier RecTune output of the same ``kind`` holding nothing else; anything else is refused
    unless ``overwrite`` (which replaces the folder and everything in it). ``writes`` holds name
    patterns of what a ``kind`` output contains, so folders written before outputs were marked count too.
    """
    target = Path(target)
    check_output_folder(target, kind, overwrite=overwrite, also_ours=writes)
    with staged_folder(target, replace=True) as staging:
        yield staging
        write_marker(staging, kind, [entry.name for entry in staging.iterdir()])


def check_output_folder(target: Path, kind: str, *, overwrite: bool, also_ours: tuple[str, ...] = ()) -> None:
    """Refuse ``target`` unless it is missing, empty, or holds only what a RecTune ``kind`` output wrote.

    ``also_ours`` are name patterns of entries a ``kind`` output may hold that it did not list (W&B's folder).
    """
    _recover(target)
    if target.exists() and not target.is_dir():
        raise RecTuneError(f"{target}: is a file; the output must be a folder")
    if overwrite or not target.is_dir():
        return
    entries = {entry.name for entry in target.iterdir() if not _is_stray(entry.name)} - {MARKER}
    if not entries:
        return
    marker = read_marker(target)
    if marker is not None and marker.get("kind") != kind:
        raise RecTuneError(
            f"{target}: holds a RecTune {marker.get('kind')} output, not a {kind} one; choose another "
            "folder or pass --overwrite to replace it"
        )
    listed = set(marker.get("entries", [])) if marker else set()
    foreign = sorted(e for e in entries - listed if not any(fnmatch.fnmatchcase(e, p) for p in also_ours))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise RecTuneError(
            f"{target}: holds files RecTune did not write there ({shown}); choose another folder or pass "
            "--overwrite to replace it"
        )


def read_marker(folder: Path) -> dict | None:
    path = folder / MARKER
    if not path.is_file():
        return None
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return marker if isinstance(marker, dict) else None


def write_marker(folder: Path, kind: str, entries: list[str]) -> None:
    write_json(folder / MARKER, {"kind": kind, "entries": sorted(set(entries) - {MARKER})})


_STRAY = re.compile(r"^\..+\.(?:staging|old)-\d+-|^\..+\.tmp$")


def _is_stray(name: str) -> bool:
    """A staging folder, a swapped-out folder or a temporary file left by an interrupted run."""
    return bool(_STRAY.match(name))


def _swap(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``; an existing ``target`` is moved aside first and then removed.

    Killed between the two renames, the next run's :func:`_recover` puts the old folder back.
    """
    if not target.exists():
        os.replace(staging, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-{os.getpid()}-", dir=target.parent))
    os.replace(target, old)
    fault_point(f"swapped-out:{target.name}")
    os.replace(staging, target)
    shutil.rmtree(old)


def _recover(target: Path) -> None:
    """Clean up after runs killed while building or swapping ``target`` (their process is gone)."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(staging|old)-(\d+)-")
    for entry in sorted(target.parent.iterdir()) if target.parent.is_dir() else ():
        match = pattern.match(entry.name)
        if not match or _alive(int(match.group(2))):
            continue
        if match.group(1) == "old" and not target.exists():
            os.replace(entry, target)  # killed mid-swap: the old set is still whole
        else:
            shutil.rmtree(entry, ignore_errors=True)


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


def make_shareable(folder: str | os.PathLike) -> None:
    """Give the files under ``folder`` the usual modes (0644 under umask 022): some writers
    (safetensors, ``tempfile``) create them private (0600), which breaks sharing a run folder."""
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, 0o666 & ~_UMASK)


def fault_point(name: str) -> None:
    """Test hook: the process kills itself here when ``RECTUNE_FAULT`` names this point.

    tests/test_faults.py uses it to interrupt runs at chosen moments, as a power cut or an OOM kill would.
    """
    if os.environ.get("RECTUNE_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Atomically write ``rows`` as JSON lines; returns the number written."""
    count = 0
    with atomic_write(path) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def write_json(path: str | os.PathLike, obj: Any, *, line_per_item: tuple[str, ...] = ()) -> None:
    """Atomically write ``obj`` as indented JSON.

    Top-level lists named in ``line_per_item`` (a report's 30,000 per-query scores, say) get one
    compact item per line: as readable, and written by the C encoder instead of the slow indenting one.
    """
    with atomic_write(path) as handle:
        if not line_per_item or not isinstance(obj, dict):
            json.dump(obj, handle, ensure_ascii=False, indent=2)
            handle.write("\n")
            return
        entries = []
        for key, value in obj.items():
            name = json.dumps(key, ensure_ascii=False)
            if key in line_per_item and isinstance(value, list) and value:
                items = ",\n".join("    " + json.dumps(item, ensure_ascii=False) for item in value)
                entries.append(f"  {name}: [\n{items}\n  ]")
            else:
                text = json.dumps(value, ensure_ascii=False, indent=2).replace("\n", "\n  ")
                entries.append(f"  {name}: {text}")
        handle.write("{\n" + ",\n".join(entries) + "\n}\n")


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found")
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError(path, f"malformed JSON: {err.msg}", line=err.lineno) from None


def numbered_jsonl(path: str | os.PathLike, *, allow_empty: bool = False) -> list[tuple[int, dict]]:
    """The JSON objects of a JSONL file, each with its line number for error messages.

    Blank lines are skipped; anything else malformed is an error naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found")
    rows = []
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(path, f"not UTF-8 text (byte {err.start + 1} of the line)", line=line_no) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(path, f"malformed JSON: {err.msg}", line=line_no) from None
            if not isinstance(row, dict):
                raise DataError(path, f"expected a JSON object, got {type(row).__name__}", line=line_no)
            rows.append((line_no, row))
    if not rows and not allow_empty:
        raise DataError(path, "file is empty")
    return rows


def require_strings(raw: dict, names: tuple[str, ...], path: str | os.PathLike, line: int) -> None:
    """Each of ``names`` must be a non-empty string in ``raw``; else an error naming file, line and field."""
    for name in names:
        if not isinstance(raw.get(name), str) or not raw[name].strip():
            raise DataError(path, f"field {name!r}: must be a non-empty string", line=line)


def read_text(path: str | os.PathLike) -> str:
    """Read text that may be UTF-8 or Latin-1 (MovieLens ``.dat`` files exist in both)."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
