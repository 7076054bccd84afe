"""gpu-check's steps as rows (a step that fails is a row saying why, and the check goes on), and its folder."""

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from perf.folders import GrowingFolder
from perf.gpu_runs import failure, run, serve_and_evaluate, serve_command, steady_tokens_per_second
from rectune.core.io import RecTuneError


def test_a_failed_step_is_none_and_its_row_names_the_error(tmp_path):
    log = tmp_path / "sft-no-checkpointing.log"
    crash = "print('Loading weights'); raise MemoryError('CUDA out of memory | tried 20 GiB')"
    assert run([sys.executable, "-c", crash], log, fatal=False) is None
    assert failure(log) == "MemoryError: CUDA out of memory / tried 20 GiB"  # a table cell: no column break
    assert run([sys.executable, "-c", "print('fine')"], log, fatal=False) > 0


def test_a_failed_step_stops_the_check_where_it_is_fatal(tmp_path):
    log = tmp_path / "data.log"
    try:
        run([sys.executable, "-c", "raise SystemExit(3)"], log)
    except SystemExit as stop:
        assert str(stop.code).startswith("gpu-check: step failed (")
    else:
        raise AssertionError("a fatal step's failure must stop the check")


def test_an_unknown_part_engine_or_setting_is_refused_naming_it():
    for flag, value, known in (("--parts", "sft,warmup", "sft, grpo"),
                               ("--engines", "vllm", "generate, as-trl, compiled"),
                               ("--settings", "baseline,turbo", "baseline, no-checkpointing")):  # fmt: skip
        result = subprocess.run([sys.executable, "-m", "perf.gpu_check", "--device", "cpu", flag, value],
                                capture_output=True, text=True, cwd=ROOT)  # fmt: skip
        assert result.returncode == 2
        assert f"{flag}: unknown {value.split(',')[-1]} (known: {known}" in result.stderr


def test_a_server_that_dies_is_a_row_naming_why_and_the_check_goes_on(tmp_path):
    """It was an endless wait for /health (or, once it had answered, an evaluation refused six times) and then the
    end of the whole check, its later parts lost."""
    out = GrowingFolder(tmp_path / "check", "gpu-check")
    seconds, why = serve_and_evaluate(str(tmp_path / "no-such-model"), "cpu", ["--data", "unused"], out)
    assert seconds is None and why.startswith("transformers serve exited (")
    assert (tmp_path / "check" / "serve.log").is_file() and not (tmp_path / "check" / "eval_served").exists()


def test_a_server_on_a_cpu_holds_the_requests_in_flight_not_a_share_of_the_machines_ram():
    cpu = serve_command("model", 8123, "cpu")
    assert cpu[cpu.index("--cb-num-blocks") + 1] == "256"  # 32 requests x 2,048 tokens in pages of 256
    assert cpu[cpu.index("--cb-max-batch-tokens") + 1] == "1024"
    gpu = serve_command("model", 8123, "cuda")  # a GPU keeps transformers' share of its free memory
    assert "--continuous-batching" in gpu and not [flag for flag in gpu if flag.startswith("--cb-")]


def test_the_steady_rate_is_the_median_step_after_the_first(tmp_path):
    run = tmp_path / "sft-baseline"
    (run / "checkpoint-5").mkdir(parents=True)
    history = [
        {"loss": 9.0, "num_tokens": 2000.0, "step": 1, "step_time": 16.0},  # the first step: left out
        {"loss": 8.0, "num_tokens": 3800.0, "step": 2, "step_time": 12.0},  # 1,800 tokens in 12 s: 150 tokens/s
        {"loss": 7.0, "num_tokens": 5500.0, "step": 3, "step_time": 20.0},  # a step the machine stalled in: 85
        {"loss": 6.0, "num_tokens": 9500.0, "step": 5, "step_time": 16.0},  # 2 steps logged at once: 4,000 / 32 s
        {"train_runtime": 80.0, "step": 5},
    ]
    (run / "checkpoint-5" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    assert steady_tokens_per_second(run) == 125.0  # the median of 150, 85 and 125 (their mean would be 120)
    (run / "checkpoint-5" / "trainer_state.json").write_text(json.dumps({"log_history": history[:1]}))
    assert steady_tokens_per_second(run) is None  # one step: nothing after the first


def test_a_growing_folder_removes_what_it_listed_and_refuses_anything_else(tmp_path):
    out = tmp_path / "check"
    folder = GrowingFolder(out, "gpu check")  # created and marked, listing nothing yet
    assert [p.name for p in out.iterdir()] == [".rectune.json"]
    (folder.entry("sft-baseline") / "checkpoint-2").mkdir(parents=True)  # listed before it is written
    folder.entry("sft-baseline.log").write_text("an earlier check's")
    assert json.loads((out / ".rectune.json").read_text())["entries"] == ["sft-baseline", "sft-baseline.log"]
    (out / "sft-notes.log").write_text("mine")  # a name like the check's own, never listed
    with pytest.raises(RecTuneError, match=r"holds files RecTune did not write there \(sft-notes.log\)"):
        GrowingFolder(out, "gpu check")
    assert sorted(p.name for p in out.iterdir()) == [
        ".rectune.json",
        "sft-baseline",
        "sft-baseline.log",
        "sft-notes.log",
    ]
    (out / "sft-notes.log").unlink()
    GrowingFolder(out, "gpu check")  # a rerun: what the earlier run wrote goes
    assert [p.name for p in out.iterdir()] == [".rectune.json"]

    folder = GrowingFolder(out, "gpu check")
    folder.entry("data.log").write_text("written")
    folder.seal()
    (out / "data.log").write_text("edited by hand")
    with pytest.raises(RecTuneError, match="data.log changed since RecTune wrote it"):
        GrowingFolder(out, "gpu check")
    assert (out / "data.log").read_text() == "edited by hand"
    GrowingFolder(out, "gpu check", overwrite=True)  # asked for: emptied, whoever wrote it
    assert [p.name for p in out.iterdir()] == [".rectune.json"]


def test_each_sealed_part_stays_vouched_for_while_later_parts_are_written(tmp_path):
    out = tmp_path / "check"
    folder = GrowingFolder(out, "gpu check")
    folder.entry("sft-baseline.log").write_text("the first part's")
    folder.seal()  # the first part is done
    (out / "sft-baseline.log").write_text("edited by hand after its part was sealed")
    folder.entry("grpo-generate.log").write_text("the second part, stopped by the time limit before its seal")
    with pytest.raises(RecTuneError, match="sft-baseline.log changed since RecTune wrote it"):
        GrowingFolder(out, "gpu check")
    assert (out / "sft-baseline.log").read_text() == "edited by hand after its part was sealed"

    folder = GrowingFolder(out, "gpu check", overwrite=True)
    folder.entry("eval_hf.log").write_text("one part's")
    folder.seal()
    folder.entry("eval_hf.log").write_text("the same entry asked for again is no longer vouched for")
    GrowingFolder(out, "gpu check")  # so a rerun removes it without calling it edited
    assert [p.name for p in out.iterdir()] == [".rectune.json"]


def test_a_growing_folder_never_removes_what_a_strangers_marker_lists(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sft-baseline.log").write_text("a folder gpu-check never marked")
    with pytest.raises(RecTuneError, match="holds files RecTune did not write there"):
        GrowingFolder(theirs, "gpu check")
    assert (theirs / "sft-baseline.log").read_text() == "a folder gpu-check never marked"
    precious = tmp_path / "precious.txt"
    precious.write_text("outside the folder")
    (theirs / "sft-baseline.log").unlink()
    (theirs / ".rectune.json").write_text(json.dumps({"kind": "gpu check", "entries": ["../precious.txt", ".."]}))
    GrowingFolder(theirs, "gpu check")
    assert precious.read_text() == "outside the folder" and theirs.is_dir()


def test_a_second_check_into_the_same_folder_is_refused_while_the_first_runs(tmp_path):
    out = tmp_path / "check"
    GrowingFolder(out, "gpu check")  # held by this process until it ends
    second = subprocess.run([sys.executable, "-m", "perf.gpu_check", "--device", "cpu", "--out", str(out)],
                            capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert second.returncode == 1 and second.stderr.startswith(f"gpu-check: {out}")
    assert f"in use by process {os.getpid()}" in second.stderr


@pytest.mark.parametrize(("flag", "value"), [("--grpo-steps", "0"), ("--batch-size", "-2"), ("--profile-steps", "-1")])
def test_a_count_out_of_range_is_refused_before_a_lent_minute_is_spent(monkeypatch, capsys, flag, value):
    from perf.gpu_check import parse_arguments

    monkeypatch.setattr(sys, "argv", ["gpu_check.py", flag, value])
    with pytest.raises(SystemExit) as stopped:
        parse_arguments()
    least = 0 if flag == "--profile-steps" else 1
    assert stopped.value.code == 2
    assert f"argument {flag}: expected a number of at least {least}, got {value}" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--profile-steps", "0"])  # 0: no profiled run
    assert parse_arguments().profile_steps == 0
