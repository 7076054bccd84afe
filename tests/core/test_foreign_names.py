"""Nothing foreign is touched by a name trick: a backup named like a swapped-out folder, a hard link, a
directory or a FIFO at the lock path, a symbolic link where the predictions file goes."""

import os

import pytest
from test_endpoint import ScriptedEndpoint
from test_faults import KILLED, prepare
from test_hostile import evaluate, one_line

from rectune.core.io import RecTuneError
from rectune.core.locks import lock_path


def test_folders_named_like_leftovers_are_left_alone(tmp_path):
    backup, look_alike = tmp_path / ".data.old-2024-01-05", tmp_path / ".data.staging-1-abcdefgh"
    for folder in (backup, look_alike):
        folder.mkdir()
        (folder / "mine.txt").write_text("a user's own")
    out = tmp_path / "data"
    assert prepare(out).returncode == 0
    assert prepare(out, "--seed", "7").returncode == 0  # a rebuild: the old set is swapped out and removed
    assert (backup / "mine.txt").read_text() == "a user's own" and (look_alike / "mine.txt").is_file()

    # a killed rebuild's own folders are still cleaned up: the ones its swap record lists
    assert prepare(out, "--seed", "8", fault="wrote:train.jsonl").returncode == KILLED
    assert any(p.name.startswith(".data.rectune-swap-") for p in tmp_path.iterdir())
    assert prepare(out, "--seed", "8").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["data", backup.name, look_alike.name])


def test_a_hard_link_at_the_lock_path_is_refused_and_its_target_kept(tmp_path):
    victim, out = tmp_path / "victim.txt", tmp_path / "data2"
    victim.write_text("precious")
    os.link(victim, lock_path(out))
    one_line(prepare(out), "lock file", "has other hard links")
    assert victim.read_text() == "precious" and not out.exists()


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_lock_path_that_is_no_file_is_one_line(tmp_path, kind):
    out = tmp_path / "data"
    if kind == "directory":
        lock_path(out).mkdir()
    else:
        os.mkfifo(lock_path(out))
    one_line(prepare(out), "lock file", "is not a plain file")
    assert not out.exists()


def test_a_predictions_file_linked_elsewhere_is_never_followed(tmp_path, movie_data):
    victim = tmp_path / "victim.log"
    victim.write_text("a log of yours\n")
    endpoint = ScriptedEndpoint(["ok"] * 6)
    try:
        out = tmp_path / "r"
        assert evaluate(out, movie_data, endpoint.url, "--limit", "2").returncode == 0
        (out / "predictions.jsonl").unlink()
        (out / "predictions.jsonl").symlink_to(victim)
        one_line(evaluate(out, movie_data, endpoint.url, "--limit", "3"), "predictions.jsonl", "not a plain file")
        assert victim.read_text() == "a log of yours\n" and (out / "predictions.jsonl").is_symlink()
    finally:
        endpoint.close()


def test_a_file_system_that_cannot_lock_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """An NFS mount without its lock service answers flock with ENOLCK: a traceback, the lock file and the
    folders made for it left behind."""
    import errno
    import fcntl

    from rectune.core import locks

    def no_locks(descriptor, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    out = tmp_path / "reports" / "new" / "out"
    with pytest.raises(RecTuneError) as refused:
        locks.hold_output_lock(out)
    assert str(refused.value) == (
        f"{out}: the file system there cannot lock files (No locks available), and a lock keeps a second process "
        "out of the folder; write it to a disk that can (a local one)"
    )
    assert list(tmp_path.iterdir()) == []  # neither the lock file nor the folders made to hold it
    mine = lock_path(tmp_path / "out")
    mine.write_text("")  # a lock file there before: not this run's to remove
    with pytest.raises(RecTuneError):
        locks.hold_output_lock(tmp_path / "out")
    assert mine.exists()
