"""Private files a save wrote are made readable, told from a user's own by a snapshot, not by times."""

import os

from rectune.core.file_modes import make_shareable, private_files
from rectune.core.io import UMASK

SHAREABLE = 0o666 & ~UMASK


def private(path, text="x"):
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_what_a_save_wrote_is_made_readable_however_old_its_time_reads(tmp_path):
    """The file system stamps files with a clock that lags the process's (ext4 here: up to 6 ms): an adapter saved
    within that lag of the time taken before the save read as older, and stayed private."""
    notes = private(tmp_path / "notes.txt")  # the user's, there before the save
    rewritten = private(tmp_path / "adapter_model.safetensors", "old")
    before = private_files(tmp_path)
    assert set(before) == {notes, rewritten}
    (tmp_path / "checkpoint-2").mkdir()
    saved = private(tmp_path / "checkpoint-2" / "adapter_model.safetensors")
    rewritten.write_text("new weights")
    for path in (saved, rewritten):
        os.utime(path, ns=(1, 1))  # stamped as if long before the snapshot
    (tmp_path / "link").symlink_to(notes)
    make_shareable(tmp_path, before=before)
    assert saved.stat().st_mode & 0o777 == SHAREABLE and rewritten.stat().st_mode & 0o777 == SHAREABLE
    assert notes.stat().st_mode & 0o777 == 0o600  # unchanged since the snapshot: left as it is
    make_shareable(tmp_path)  # no snapshot: a folder RecTune built whole (a staging folder)
    assert notes.stat().st_mode & 0o777 == SHAREABLE
