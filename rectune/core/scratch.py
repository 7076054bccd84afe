"""Scratch folders in the temporary directory that a killed process does not leave behind for good.

A process removes its scratch folder when it ends, however it ends but one way: a SIGKILL (the OOM
killer's signal, and a scheduler's last word) runs no clean-up, and the folder keeps what it held (a
rating store's database and DuckDB's spill files: gigabytes at ML-25M size) until someone removes it.
So while a folder is in use its process holds a ``flock`` on the folder's holder file, which the kernel
releases however the process ends; the next process that opens a scratch folder of the same kind removes
each folder of that kind whose lock it can take and whose holder file names a process: one no living
process holds. A lock, unlike a process id, also holds across containers that share one ``/tmp``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rectune.core.io import RecTuneError
from rectune.core.locks import CANNOT_LOCK, still_at

HOLDER = ".holder"  # flocked while the folder is in use; names the process, written once locked
_HELD: set[Path] = set()  # this process's own: where flock is emulated by per-process locks (NFS), a
# second lock by the same process would be granted


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A new folder ``<tmp>/<prefix>XXXXXXXX``, removed when the block ends; abandoned ones of the same
    ``prefix`` (their process killed) are removed first, each named on stderr."""
    root = Path(tempfile.gettempdir())
    for abandoned in abandoned_folders(root, prefix):
        size = _size(abandoned)
        shutil.rmtree(abandoned, ignore_errors=True)
        print(f"removed {abandoned} ({size / 2**20:.1f} MiB), left by a process that was killed", file=sys.stderr)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    descriptor = None
    try:
        descriptor = os.open(folder / HOLDER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o600)  # fmt: skip
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # waits out a process that took it to look, finding it empty
        except OSError as err:
            if err.errno not in CANNOT_LOCK:
                raise
            raise RecTuneError(
                f"the temporary folder {root} cannot lock files ({err.strerror}), which its scratch folders need to "
                "be cleaned up after a killed run; set TMPDIR to a folder on a local disk"
            ) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": Path(sys.argv[0]).name}
        os.write(descriptor, json.dumps(holder).encode() + b"\n")
        _HELD.add(folder)
        yield folder
    finally:
        _HELD.discard(folder)
        shutil.rmtree(folder, ignore_errors=True)  # while still holding the lock: no one else removes it
        if descriptor is not None:
            os.close(descriptor)


def abandoned_folders(root: Path, prefix: str) -> Iterator[Path]:
    """The folders ``root/<prefix>*`` of this user that no living process holds, each yielded while this
    process holds its lock. A folder without a holder file, or with an empty one (its process killed
    between creating it and writing it, or writing it now), is left alone: it may be no scratch folder."""
    try:
        entries = sorted(root.iterdir())
    except OSError:  # a temporary directory one may write to but not list: nothing to find there
        return
    for entry in entries:
        if not entry.name.startswith(prefix) or entry in _HELD:
            continue
        try:
            found = entry.lstat()
            if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
                continue
            descriptor = os.open(entry / HOLDER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:  # gone meanwhile, not ours to read, no holder file, or a link or FIFO planted there
            continue
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode) or not _lock_free(descriptor):
                continue
            # still_at: the holder file locked is not one its process removed, with its folder, on the way out
            if _names_a_process(os.read(descriptor, 4096)) and still_at(descriptor, entry / HOLDER):
                yield entry
        finally:
            os.close(descriptor)


def _size(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):  # links are not followed
        with contextlib.suppress(OSError):
            total += path.lstat().st_size
    return total


def _lock_free(descriptor: int) -> bool:
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # its process is alive and using it
    except OSError as err:
        if err.errno not in CANNOT_LOCK:
            raise
        return False  # no lock tells whether its process lives: left alone
    return True


def _names_a_process(raw: bytes) -> bool:
    try:
        holder = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return isinstance(holder, dict) and isinstance(holder.get("pid"), int)
