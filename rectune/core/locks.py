"""One process at a time per output folder: a lock file beside the folder, held with ``flock``.

The kernel releases a ``flock`` when its process ends, however it ends (a kill, an OOM, a power
cut's reboot), so a lock file left behind by a dead process is simply taken over by the next run.
The file ``.<folder>.lock`` names the process holding it and is removed when the lock is released,
with the folders made to hold it when nothing else came into them (a run that fails on its input
leaves no empty ``reports/`` behind).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from rectune.core.io import RecTuneError, fault_point

_HELD: dict[Path, int] = {}  # lock file -> open descriptor, for the locks this process holds
_MADE: dict[Path, list[Path]] = {}  # lock file -> the folders made for it, deepest first
CANNOT_LOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)  # a file system without flock (NFS with no lockd)


def lock_path(target: str | os.PathLike) -> Path:
    absolute = Path(os.path.abspath(target))
    return absolute.parent / f".{absolute.name}.lock"


def hold_output_lock(target: str | os.PathLike) -> None:
    """Own ``target`` for the rest of this process; refuse in one line when another process owns it."""
    path = lock_path(target)
    if path in _HELD:
        return
    made = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]
    for attempt in range(3):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = _locked_descriptor(path, target)
            break
        except FileNotFoundError:  # another run removed the empty folder it had made between the two calls
            if attempt == 2:
                raise
        except RecTuneError:
            _remove_empty(made)
            raise
    _MADE[path] = made
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": Path(sys.argv[0]).name,  # the script only: its flags may hold paths or names not to share
        "since": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, json.dumps(holder).encode() + b"\n", 0)
    _HELD[path] = descriptor
    fault_point(f"locked:{Path(target).name}")


def _locked_descriptor(path: Path, target: str | os.PathLike) -> int:
    """Open ``path`` (never through a symbolic link) and flock it, as the file still at ``path``.

    A releasing process unlinks the file while holding it; a process that opened the old file just before
    would otherwise flock a file no longer there while a third locks the new one: both would hold the lock.
    """
    while True:
        created = not os.path.lexists(path)
        try:  # O_NONBLOCK: a FIFO planted at the path must not hang the open
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666)
        except OSError as err:
            if err.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                kind = "a symbolic link" if err.errno == errno.ELOOP else "not a plain file"
                raise RecTuneError(f"{target}: its lock file {path} is {kind}; remove it") from None
            raise
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
            os.close(descriptor)  # a hard link's other name would get the lock record written into it
            kind = "has other hard links" if stat.S_ISREG(found.st_mode) else "is not a plain file"
            raise RecTuneError(f"{target}: its lock file {path} {kind}; remove it")
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(os.read(descriptor, 4096))
            os.close(descriptor)
            raise RecTuneError(
                f"{target}: in use by {holder}; wait for it to finish or choose another folder"
            ) from None
        except OSError as err:
            os.close(descriptor)
            if err.errno not in CANNOT_LOCK:
                raise
            if created:
                path.unlink(missing_ok=True)
            raise RecTuneError(  # an NFS mount without its lock service: flock's ENOLCK, a traceback
                f"{target}: the file system there cannot lock files ({err.strerror}), and a lock keeps a second "
                "process out of the folder; write it to a disk that can (a local one)"
            ) from None
        if still_at(descriptor, path):
            return descriptor
        os.close(descriptor)  # locked a file its holder removed on release: lock the one at path now


def release_output_lock(target: str | os.PathLike) -> None:
    _release(lock_path(target))


def _release(path: Path) -> None:
    descriptor = _HELD.pop(path, None)
    if descriptor is not None:
        path.unlink(missing_ok=True)  # while still holding it, so no one locks a file about to vanish
        os.close(descriptor)  # closing the only descriptor releases the flock
    _remove_empty(_MADE.pop(path, []))


def _remove_empty(folders: list[Path]) -> None:
    """The folders made for a lock, deepest first: only an empty folder goes, one something came into stays."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            break


@atexit.register
def _release_all() -> None:
    for path in list(_HELD):
        _release(path)


@contextlib.contextmanager
def output_lock(target: str | os.PathLike) -> Iterator[None]:
    """Own ``target`` while the block runs (or longer, when this process already held it)."""
    held_before = lock_path(target) in _HELD
    hold_output_lock(target)
    try:
        yield
    finally:
        if not held_before:
            release_output_lock(target)


def still_at(descriptor: int, path: Path) -> bool:
    """The file ``descriptor`` has open is the one at ``path`` now, not one removed or replaced since."""
    try:
        held, there = os.fstat(descriptor), os.lstat(path)
        return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)
    except FileNotFoundError:
        return False


def _describe(raw: bytes) -> str:
    try:
        holder = json.loads(raw.decode("utf-8"))
        return f"process {holder['pid']} on {holder['host']} ({holder['command']}, since {holder['since']})"
    except (ValueError, KeyError, TypeError, RecursionError):  # a lock file of another shape, planted or cut
        return "another process"
