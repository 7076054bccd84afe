"""Output paths that can never be written whole, refused in one line before anything is made.

RecTune writes beside every output NAME: its lock (``.NAME.lock``), its temporary files
(``.NAME.rectune-PID-XXXXXXXX.tmp``), a folder's staging copy and swap record (and that record's temporary
file). A path under a file or under a link to nothing, the current folder, or a NAME too long for those
companions would fail half-way (``mkdir``'s ``FileExistsError``, the kernel's "File name too long" as the lock
was made: tracebacks). A path that starts with a ``~`` the shell left as it is would be a folder named ``~`` here.
"""

from __future__ import annotations

import os
from pathlib import Path

from rectune.core.io import RecTuneError

# the longest name RecTune writes beside an output NAME, less NAME: the temporary file of a folder's swap record,
# "..NAME.rectune-swap-PID.json.rectune-PID-XXXXXXXX.tmp", a PID of up to 7 digits (Linux's largest, 4194304) and
# tempfile's 8 characters
COMPANION_BYTES = 57
NAME_MAX = 255  # where the file system does not say (Linux's ext4, XFS, btrfs: 255 bytes)


def check_output_path(target: Path) -> None:
    """Refuse, in one line, an output path that can never be swapped in whole."""
    _check_home_not_left_unexpanded(target)
    absolute = Path(os.path.abspath(target))
    _check_name_length(target, absolute)  # first: the kernel refuses even to look up a name past its limit
    if target.is_symlink():
        real = os.path.realpath(target)  # Path.resolve raised on a link to itself: a traceback instead of this line
        raise RecTuneError(f"{target}: is a symbolic link; give the folder itself ({real}) or another one")
    if absolute == Path.cwd() or absolute in Path.cwd().parents or absolute.parent == absolute:
        raise RecTuneError(f"{target}: is the current folder or holds it; name a folder inside it instead")
    for folder in absolute.parents:
        if folder.is_symlink() and not folder.exists():  # mkdir raised FileExistsError there: a traceback
            raise RecTuneError(f"{target}: {folder} is a symbolic link to nothing (or to itself), so nothing can be "
                               "written under it")  # fmt: skip
        if folder.exists():
            if not folder.is_dir():
                raise RecTuneError(f"{target}: {folder} is a file, so nothing can be written under it")
            break


def _check_home_not_left_unexpanded(target: Path) -> None:
    """A lone ``~`` (``--out=~``, ``--out "~"``) or ``~user`` reaches the script as it is where bash expands it only
    at a word's start and unquoted, and :func:`rectune.core.cli.expand_home` expands ``~/`` alone (a lone ``~`` is a
    stop string elsewhere): written to, it made a folder named ``~`` in the current one, which ``rm -rf ~`` would
    take the home folder with."""
    first = next(iter(target.parts), "")
    home = os.path.expanduser(first) if first.startswith("~") else first
    if home != first:
        raise RecTuneError(
            f"{target}: would be a folder named {first!r} in the current one, where the shell reads {first} as "
            f"{home} (it was quoted, or came after '='); give the path you mean"
        )


def _check_name_length(target: Path, absolute: Path) -> None:
    existing = next((folder for folder in absolute.parents if folder.is_dir()), Path("/"))
    try:
        most = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        most = NAME_MAX
    for folder in absolute.parents:  # the folders it would make on the way (they were made, then the lock failed)
        if len(os.fsencode(folder.name)) > most:
            raise RecTuneError(f"{target}: a folder name of {len(os.fsencode(folder.name))} bytes; at most {most} here")
    size = len(os.fsencode(absolute.name))
    if size + COMPANION_BYTES > most:
        raise RecTuneError(
            f"{target}: a name of {size} bytes; the lock and temporary files RecTune writes beside it "
            f"(.NAME.lock, .NAME.rectune-…tmp) need it at most {most - COMPANION_BYTES} bytes long here"
        )
