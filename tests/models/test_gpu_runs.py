"""gpu-check's steps as rows: a step that fails is a row saying why, and the check goes on."""

import subprocess
import sys
from pathlib import Path

from perf.gpu_runs import failure, run

ROOT = Path(__file__).resolve().parents[2]


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
    for flag, value, known in (("--parts", "sft,warmup", "sft, grpo"), ("--engines", "vllm", "generate, compiled"),
                               ("--settings", "baseline,turbo", "baseline, no-checkpointing")):  # fmt: skip
        result = subprocess.run([sys.executable, "-m", "perf.gpu_check", "--device", "cpu", flag, value],
                                capture_output=True, text=True, cwd=ROOT)  # fmt: skip
        assert result.returncode == 2
        assert f"{flag}: unknown {value.split(',')[-1]} (known: {known}" in result.stderr
