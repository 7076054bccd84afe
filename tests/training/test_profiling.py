"""profile_steps: PyTorch's profiler over chosen optimizer steps (rectune/training/profiling.py)."""

import gzip
import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import can_mount_tmpfs
from transformers import TrainerState, TrainingArguments

from rectune.core.scratch import HOLDER
from rectune.training.arguments import RunArguments
from rectune.training.profiling import StepProfiler, step_profiler

# one operator only each step runs, so the table shows which steps were profiled
STEP_OPERATORS = {
    1: lambda x: torch.cumsum(x, 0),  # aten::cumsum
    2: torch.sort,  # aten::sort
    3: lambda x: torch.flip(x, (0,)),  # aten::flip
    4: torch.argsort,  # aten::argsort
}


def run_steps(profiler: StepProfiler, output_dir, steps: int = 4) -> None:
    """What the trainer calls around ``steps`` optimizer steps, each running its own operator."""
    args, state = TrainingArguments(output_dir=str(output_dir), report_to=[]), TrainerState(max_steps=steps)
    profiler.on_train_begin(args, state, None)
    for step in range(1, steps + 1):
        profiler.on_step_begin(args, state, None)
        STEP_OPERATORS[step](torch.arange(8.0))
        state.global_step = step  # the trainer counts the step as taken before on_step_end
        profiler.on_step_end(args, state, None)
    profiler.on_train_end(args, state, None)


def test_the_chosen_steps_and_only_they_are_profiled(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"  # the raw trace's folder goes here; one a killed run left is removed
    left = scratch / "rectune-trace-killed"
    left.mkdir(parents=True)
    (left / HOLDER).write_text(json.dumps({"pid": 0}))
    (left / "trace.json").write_text("{")
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (profiler,) = step_profiler(TrainingArguments(output_dir=str(tmp_path), report_to=[]), [2, 3])
    run_steps(profiler, tmp_path)
    assert list(scratch.iterdir()) == []
    table = (tmp_path / "profile" / "steps-2-3.txt").read_text()
    assert table.startswith(f"optimizer steps 2-3 of {tmp_path} on ")
    assert "aten::sort" in table and "aten::flip" in table
    assert "aten::cumsum" not in table and "aten::argsort" not in table
    trace = json.loads(gzip.decompress((tmp_path / "profile" / "trace-steps-2-3.json.gz").read_bytes()))
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {"aten::sort", "aten::flip"} <= names and "aten::cumsum" not in names
    assert sorted(p.name for p in (tmp_path / "profile").iterdir()) == ["steps-2-3.txt", "trace-steps-2-3.json.gz"]


def test_one_step(tmp_path):
    (profiler,) = step_profiler(TrainingArguments(output_dir=str(tmp_path), report_to=[]), [4])
    run_steps(profiler, tmp_path)
    table = (tmp_path / "profile" / "steps-4-4.txt").read_text()
    assert "aten::argsort" in table and "aten::flip" not in table


def test_a_range_past_the_runs_end_is_written_when_training_ends(tmp_path):
    (profiler,) = step_profiler(TrainingArguments(output_dir=str(tmp_path), report_to=[]), [3, 9])
    run_steps(profiler, tmp_path)  # 4 steps: the profiler would otherwise run on, unwritten
    table = (tmp_path / "profile" / "steps-3-4.txt").read_text()
    assert table.startswith(f"optimizer steps 3-4 of {tmp_path}") and "aten::argsort" in table


def test_a_step_the_run_never_takes_is_said_and_nothing_written(tmp_path, caplog):
    (profiler,) = step_profiler(TrainingArguments(output_dir=str(tmp_path), report_to=[]), [5])
    run_steps(profiler, tmp_path)
    assert "profile_steps: step 5 is not among the steps this run takes (1 to 4): nothing profiled" in caplog.text
    assert not (tmp_path / "profile").exists()


def test_no_profile_unless_asked(tmp_path):
    assert step_profiler(TrainingArguments(output_dir=str(tmp_path), report_to=[]), []) == []


@pytest.mark.parametrize("steps", [[0], [3, 2], [1, 2, 3]])
def test_profile_steps_must_be_one_step_or_a_range(steps):
    with pytest.raises(ValueError, match=r"profile_steps: .* is not one step or a first and last step"):
        RunArguments(profile_steps=steps)


def test_a_profile_spans_ten_steps_at_most():
    assert RunArguments(profile_steps=[3, 12]).profile_steps == [3, 12]
    with pytest.raises(ValueError, match=r"profile_steps: \[3, 13\] spans 11 steps; at most 10"):
        RunArguments(profile_steps=[3, 13])


def test_a_profile_that_cannot_be_written_leaves_training_going(tmp_path, caplog):
    (tmp_path / "profile").write_text("a file where the profile folder would go")
    (profiler,) = step_profiler(TrainingArguments(output_dir=str(tmp_path), report_to=[]), [2])
    run_steps(profiler, tmp_path)  # raises nothing
    assert "profile_steps: the profile of steps 2-2 was not written: " in caplog.text
    assert profiler.profiler is None  # stopped all the same


@pytest.mark.skipif(not can_mount_tmpfs(), reason="needs unshare and a mount namespace (to make a small tmpfs)")
def test_a_full_temporary_folder_says_so_and_the_table_is_still_written(tmp_path):
    """torch's trace exporter gives up on a full disk without a word: the warning said the raw trace was missing."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = (
        f"import sys; sys.path[:0] = {[str(Path(__file__).parent), str(Path(__file__).parents[1])]!r}; "
        "from pathlib import Path; "
        "from transformers import TrainingArguments; from test_profiling import run_steps, step_profiler; "
        f"out = Path({str(tmp_path / 'run')!r}); "
        "(profiler,) = step_profiler(TrainingArguments(output_dir=str(out), report_to=[]), [2]); "
        "run_steps(profiler, out)"
    )
    folder = shlex.quote(str(scratch))
    python = f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}"
    shell = f"mount -t tmpfs -o size=4k tmpfs {folder} && TMPDIR={folder} {python}"
    result = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    warned = [line for line in result.stderr.splitlines() if "profile_steps:" in line]
    said = (
        rf"profile_steps: the profile of steps 2-2 was not written: \[Errno 28\] no space left in the temporary "
        rf"folder {re.escape(str(scratch))} for the raw trace \(set TMPDIR to a folder on a disk with room\): "
        rf"'{re.escape(str(scratch))}/rectune-trace-\w+/trace\.json'"
    )
    assert len(warned) == 1 and re.search(said + "$", warned[0]), result.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "run" / "profile").iterdir()) == ["steps-2-2.txt"]
