"""A run whose standard output (and error) is a pipe nobody reads any more (`| head`, a pager quit early) goes on
to its end: a print there had raised BrokenPipeError, a traceback that stopped training or evaluation midway."""

import os
import subprocess
import sys

from conftest import ROOT
from test_training import sft_recipe

from rectune.core.closed_pipes import GONE


def run_unread(script: str, *args, stderr_too: bool = False) -> tuple[int, str]:
    """Run ``script`` with its stdout (and stderr) a pipe whose reading end is closed before it starts."""
    read, write = os.pipe()
    os.close(read)  # the reader has gone: every write to ``write`` is EPIPE
    try:
        result = subprocess.run(
            [sys.executable, str(ROOT / script), *map(str, args)], stdout=write,
            stderr=write if stderr_too else subprocess.PIPE, cwd=ROOT, timeout=600,
        )  # fmt: skip
    finally:
        os.close(write)
    return result.returncode, (result.stderr or b"").decode()


def test_an_evaluation_whose_reader_left_writes_and_logs_its_report(tmp_path, tiny_model, movie_data):
    out = tmp_path / "report"
    status, stderr = run_unread("evaluate/run.py", "--model", tiny_model, "--data", movie_data / "test.jsonl",
                                "--out", out, "--max-new-tokens", "4")  # fmt: skip
    assert status == 0, stderr[-3000:]
    assert "Traceback" not in stderr and stderr.count(GONE.format(name="stdout")) == 1
    assert (out / "report.json").is_file() and (out / "wandb_logged.json").is_file()  # the W&B run after the table


def test_training_whose_stdout_and_stderr_readers_left_runs_to_its_end(tmp_path, tiny_model, train_data):
    out = tmp_path / "sft"
    status, _ = run_unread("train/sft.py", sft_recipe(tmp_path / "r.yaml", tiny_model, train_data, out),
                           stderr_too=True)  # fmt: skip
    assert status == 0
    assert (out / "finished.json").is_file() and (out / "checkpoint-4").is_dir()
