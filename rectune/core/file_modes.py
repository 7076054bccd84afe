"""The modes of the files RecTune writes: private ones a writer made so (safetensors, ``tempfile``: 0600) are given
the usual modes (0644 under umask 022), so a run folder can be shared; files of anyone else's keep theirs.

What a save wrote is told by comparing the folder with a snapshot taken before it (:func:`private_files`), not by
modification times: a file system stamps a file with a clock that lags the process's (this machine's ext4 up to
6 ms, a coarse tick; an NFS server's own clock, which may be seconds off), so a small adapter saved within that lag
of the time taken before the save read as older than it, and stayed private.
"""

from __future__ import annotations

import os
from pathlib import Path

from rectune.core.io import UMASK

Snapshot = dict[Path, tuple[int, int, int]]  # a private file: its inode, modification time and size


def private_files(folder: str | os.PathLike) -> Snapshot:
    """The private files under ``folder`` that this process's user owns, each as it is now."""
    found: Snapshot = {}
    for path in Path(folder).rglob("*"):  # links are not followed
        stat = path.lstat()
        if path.is_file() and not path.is_symlink() and stat.st_uid == os.getuid() and not stat.st_mode & 0o044:
            found[path] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return found


def make_shareable(folder: str | os.PathLike, *, before: Snapshot | None = None) -> None:
    """Give the private files under ``folder`` (a folder RecTune made) the usual modes: every one where ``before`` is
    None, else those written since that snapshot of it (new, or changed); a symbolic link and what it points to
    never."""
    for path, now in private_files(folder).items():
        if before is None or before.get(path) != now:
            os.chmod(path, 0o666 & ~UMASK)
