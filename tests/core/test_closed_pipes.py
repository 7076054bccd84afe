"""A run whose standard output (and error) is a pipe nobody reads any more (`| head`, a pager quit early) goes on
to its end: a print there had raised BrokenPipeError, a traceback that stopped training or evaluation midway."""

import os
import signal
import subprocess
import sys
import time

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


def test_an_evaluation_left_going_on_a_terminal_that_closed_writes_its_report(tmp_path, tiny_model, movie_data):
    """A job disowned before a logout: its terminal hung up, and every write there was EIO, a traceback."""
    import pty

    controller, terminal = pty.openpty()
    os.close(controller)  # the terminal's other end gone: the writes there fail with EIO
    out = tmp_path / "report"
    try:
        result = subprocess.run(
            [sys.executable, str(ROOT / "evaluate/run.py"), "--model", str(tiny_model), "--data",
             str(movie_data / "test.jsonl"), "--out", str(out), "--no-wandb", "--max-new-tokens", "4"],
            stdout=terminal, stderr=terminal, cwd=ROOT, timeout=600,
        )  # fmt: skip
    finally:
        os.close(terminal)
    assert result.returncode == 0
    assert (out / "report.json").is_file() and (out / "report.md").is_file()


def test_training_whose_stdout_and_stderr_readers_left_runs_to_its_end(tmp_path, tiny_model, train_data):
    out = tmp_path / "sft"
    status, _ = run_unread("train/sft.py", sft_recipe(tmp_path / "r.yaml", tiny_model, train_data, out),
                           stderr_too=True)  # fmt: skip
    assert status == 0
    assert (out / "finished.json").is_file() and (out / "checkpoint-4").is_dir()


def test_a_sigterm_with_no_reader_of_stderr_still_saves_the_step_and_stops(tmp_path, tiny_model, train_data):
    out = tmp_path / "sft"
    recipe = sft_recipe(tmp_path / "r.yaml", tiny_model, train_data, out, max_steps=100000, save_steps=2)
    read, write = os.pipe()
    os.close(read)
    process = subprocess.Popen([sys.executable, str(ROOT / "train/sft.py"), str(recipe)], stdout=write, stderr=write,
                               cwd=ROOT)  # fmt: skip
    os.close(write)
    deadline = time.monotonic() + 300
    while not (out / "checkpoint-2" / "trainer_state.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=300) == 128 + signal.SIGTERM
    assert not (out / "finished.json").exists()
    assert max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")) > 2  # the step under way, saved


def test_the_sigterm_handlers_line_to_a_stderr_nobody_reads_raises_nothing(monkeypatch):
    """It writes to the descriptor itself: where no print had found the reader gone before, its EPIPE was raised
    inside whatever the training step was doing."""
    from rectune.training.sigterm_checkpoint import CheckpointOnSigterm

    monkeypatch.delenv("RANK", raising=False)
    read, write = os.pipe()
    os.close(read)
    saved = os.dup(2)
    try:
        os.dup2(write, 2)
        callback = CheckpointOnSigterm()
        callback._ask(signal.SIGTERM, None)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(write)
    assert callback.asked


def test_the_rectune_commands_usage_to_a_closed_pipe_is_no_traceback():
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", "rectune.core.command", "--help"], stdout=write,
                                stderr=subprocess.PIPE, cwd=ROOT, timeout=60)  # fmt: skip
    finally:
        os.close(write)
    assert result.returncode == 0 and result.stderr.decode() == GONE.format(name="stdout")
