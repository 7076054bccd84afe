"""Scratch folders: removed when their block ends; one a killed process left is removed by the next process
that opens one of its kind, and nothing else that looks like one is."""

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

from rectune.core.scratch import HOLDER, scratch_folder

PREFIX = "rectune-test-"

HOLD = """
import sys, time
from rectune.core.scratch import scratch_folder
with scratch_folder("rectune-test-") as folder:
    (folder / "db").write_bytes(bytes(2**20))
    print(folder, flush=True)
    time.sleep(600)
"""


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this process's temporary directory
    return tmp_path


def holding_process(tmp):
    held = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp)})  # fmt: skip
    return held, held.stdout.readline().strip()


def test_a_folder_is_removed_when_its_block_ends_however_it_ends(tmp):
    with scratch_folder(PREFIX) as folder:
        assert folder.parent == tmp and folder.name.startswith(PREFIX)
        assert json.loads((folder / HOLDER).read_text())["pid"] == os.getpid()
        (folder / "spill").mkdir()
    assert list(tmp.iterdir()) == []
    with pytest.raises(KeyError), scratch_folder(PREFIX) as folder:
        raise KeyError("a bad record")
    assert list(tmp.iterdir()) == []


def test_a_killed_process_folder_is_removed_by_the_next_and_a_living_ones_is_not(tmp, capsys):
    held, path = holding_process(tmp)
    try:
        with scratch_folder(PREFIX) as mine:
            assert sorted(p.name for p in tmp.iterdir()) == sorted([mine.name, os.path.basename(path)])
        assert os.path.isdir(path) and capsys.readouterr().err == ""  # alive: its lock is held
    finally:
        held.send_signal(signal.SIGKILL)
        held.wait()
    assert os.path.isdir(path)  # a SIGKILL runs no clean-up
    with scratch_folder(PREFIX) as mine:
        assert [p.name for p in tmp.iterdir()] == [mine.name]
    assert capsys.readouterr().err == f"removed {path} (1.0 MiB), left by a process that was killed\n"
    assert list(tmp.iterdir()) == []


def test_what_only_looks_like_an_abandoned_folder_is_left_alone(tmp, capsys):
    kept = {
        "no-holder": {"notes.txt": "mine"},  # a user's folder under the same prefix
        "empty-holder": {HOLDER: ""},  # killed before writing it, or writing it now
        "foreign-holder": {HOLDER: "not json"},
        "list-holder": {HOLDER: "[1, 2]"},
    }
    for name, files in kept.items():
        (tmp / f"{PREFIX}{name}").mkdir()
        for file, text in files.items():
            (tmp / f"{PREFIX}{name}" / file).write_text(text)
    (tmp / f"{PREFIX}a-file").write_text("mine")
    target = tmp / "elsewhere"
    target.mkdir()
    (target / HOLDER).write_text(json.dumps({"pid": 1}))
    (tmp / f"{PREFIX}a-link").symlink_to(target)  # a link to a folder: never followed into
    linked = tmp / f"{PREFIX}linked-holder"
    linked.mkdir()
    (linked / HOLDER).symlink_to(target / HOLDER)
    before = sorted(p.name for p in tmp.iterdir())
    with scratch_folder(PREFIX) as mine:
        assert sorted(p.name for p in tmp.iterdir()) == sorted([*before, mine.name])
    assert sorted(p.name for p in tmp.iterdir()) == before and capsys.readouterr().err == ""
    assert (target / HOLDER).exists() and (tmp / f"{PREFIX}no-holder" / "notes.txt").read_text() == "mine"


def test_a_temporary_directory_that_cannot_be_listed_still_gives_a_folder(tmp, monkeypatch):
    from pathlib import Path

    def refused(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "iterdir", refused)  # as a mode 0o333 folder lists for anyone but root
    with scratch_folder(PREFIX) as folder:
        assert folder.is_dir() and folder.parent == tmp
    assert not folder.exists()


def test_a_folder_this_process_holds_is_never_its_own_abandoned_one(tmp, monkeypatch):
    import rectune.core.scratch as scratch

    # where flock is emulated by per-process locks (NFS), this process would be granted its own lock again
    monkeypatch.setattr(scratch, "_lock_free", lambda descriptor: True)
    with scratch_folder(PREFIX) as outer, scratch_folder(PREFIX) as inner:
        assert outer.is_dir() and inner.is_dir()
    assert list(tmp.iterdir()) == []


def test_a_temporary_directory_that_cannot_lock_is_one_line_and_an_old_folder_there_is_kept(tmp, monkeypatch):
    """TMPDIR on an NFS mount without its lock service: flock's ENOLCK was a traceback."""
    import errno
    import fcntl

    from rectune.core.io import RecTuneError

    held, path = holding_process(tmp)  # a folder some process made while locks worked
    held.send_signal(signal.SIGKILL)
    held.wait()

    def no_locks(descriptor, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(RecTuneError) as refused, scratch_folder(PREFIX):
        pytest.fail("a scratch folder was given where no lock can be held")
    assert str(refused.value) == (
        f"the temporary folder {tmp} cannot lock files (No locks available), which its scratch folders need to be "
        "cleaned up after a killed run; set TMPDIR to a folder on a local disk"
    )
    assert [str(p) for p in tmp.iterdir()] == [path]  # no lock says whether its process lives: kept
