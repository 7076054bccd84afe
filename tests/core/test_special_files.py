"""A stranger's folder can hold a FIFO (an archive carries them) or a link to a device: whatever opens it waits
for a writer forever, or reads without end. Each is one line naming the file, before anything reads it."""

import os
import re
import shutil
import socket

import pytest
from conftest import RELEASE, run_script

from rectune.core.io import DataError, check_plain_files, require_file

FIFO = "is a FIFO (named pipe), not a plain file; reading it would wait or never end"


def test_fifos_sockets_and_links_to_devices_are_named(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path / "config.json", tmp_path / "linked.json")  # the Hugging Face cache's links: fine
    os.symlink(tmp_path / "gone", tmp_path / "dangling.json")  # left to the loader, which says it is missing
    check_plain_files(tmp_path)

    os.mkfifo(tmp_path / "tokenizer.json")
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'tokenizer.json'}: {FIFO}")):
        check_plain_files(tmp_path)
    os.remove(tmp_path / "tokenizer.json")

    os.symlink("/dev/zero", tmp_path / "model.safetensors")
    with pytest.raises(DataError) as caught:
        check_plain_files(tmp_path)
    assert str(caught.value) == (
        f"{tmp_path / 'model.safetensors'}: links to /dev/zero, a character device, not a plain file; reading it "
        "would wait or never end"
    )
    os.remove(tmp_path / "model.safetensors")

    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(tmp_path / "vocab.json"))
    with pytest.raises(DataError, match="vocab.json: is a socket, not a plain file"):
        check_plain_files(tmp_path)
    listening.close()


def test_a_file_that_is_no_plain_file_says_what_it_is(tmp_path):
    with pytest.raises(DataError, match=f"^{tmp_path / 'a.jsonl'}: file not found$"):
        require_file(tmp_path / "a.jsonl")
    with pytest.raises(DataError, match=f"^{tmp_path}: is a folder, not a file$"):
        require_file(tmp_path)
    for name in ("valid.jsonl", "test.jsonl", "notes.txt"):
        (tmp_path / name).write_text("")
    with pytest.raises(DataError) as caught:  # a prepared folder given as --data: its files named
        require_file(tmp_path)
    assert str(caught.value) == f"{tmp_path}: is a folder, not a file (it holds test.jsonl, valid.jsonl: give one)"
    for name in ("valid.jsonl", "test.jsonl", "notes.txt"):
        (tmp_path / name).unlink()
    os.mkfifo(tmp_path / "a.jsonl")
    with pytest.raises(DataError, match="a.jsonl: is a FIFO"):
        require_file(tmp_path / "a.jsonl", "recipe file not found")
    (tmp_path / "b.jsonl").write_text("{}\n")
    require_file(tmp_path / "b.jsonl")


def test_evaluation_of_a_model_folder_holding_a_fifo_is_one_line(tmp_path, tiny_model, movie_data):
    """The folder's weights were a FIFO: the check of their header opened it and waited for ever."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    os.remove(model / "model.safetensors")
    os.mkfifo(model / "model.safetensors")
    args = ("--data", movie_data / "test.jsonl", "--max-new-tokens", "2", "--limit", "1", "--no-wandb")
    result = run_script("evaluate/run.py", "--model", model, "--out", tmp_path / "e", *args, check=False, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == f"error: {model / 'model.safetensors'}: {FIFO}"
    assert not (tmp_path / "e").exists()


def test_a_release_holding_a_fifo_is_one_line_not_a_missing_file(tmp_path):
    """A FIFO for ratings.dat read as missing: the benchmark was built without user history, exit 0."""
    release = tmp_path / "release"
    shutil.copytree(RELEASE, release)
    ratings = release / "data" / "movie" / "ratings.dat"
    os.remove(ratings)
    os.mkfifo(ratings)
    result = run_script(
        "data_prep/recbench.py", "--src", release, "--domain", "movie", "--out", tmp_path / "out", check=False,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == f"error: {ratings}: {FIFO}"
    assert not (tmp_path / "out").exists()
