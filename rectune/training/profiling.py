"""``profile_steps``: PyTorch's profiler over chosen optimizer steps of a real training run.

The main process profiles optimizer steps FIRST to LAST (1-based, as the progress bar counts them) and
writes, into ``output_dir/profile/``, the operators' table (``steps-FIRST-LAST.txt``: self time on the
device first where there is a GPU, else on the CPU) and the Chrome/Perfetto trace
(``trace-steps-FIRST-LAST.json.gz``). Profiling slows the steps it covers: time the run's speed from
others.
"""

from __future__ import annotations

import errno
import gzip
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import TrainerCallback

from rectune.core.io import atomic_write
from rectune.core.outputs import free_bytes
from rectune.core.scratch import scratch_folder

log = logging.getLogger(__name__)

ROWS = 40  # operators in the table: the ones that matter in a step, without its long tail


def operator_table(profiler: profile, device: bool) -> str:
    """The profiled operators, most self time first (on the device where there is one)."""
    key = "self_device_time_total" if device else "self_cpu_time_total"
    return profiler.key_averages().table(sort_by=key, row_limit=ROWS, max_name_column_width=70)


class StepProfiler(TrainerCallback):
    """Profiles optimizer steps ``first`` to ``last`` on the main process into ``folder``."""

    def __init__(self, first: int, last: int, folder: Path):
        self.first, self.last, self.folder = first, last, folder
        self.device = torch.cuda.is_available()
        self.profiler: profile | None = None
        self.started = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero and not state.global_step < self.first <= state.max_steps:
            log.warning("profile_steps: step %d is not among the steps this run takes (%d to %d): nothing profiled",
                        self.first, state.global_step + 1, state.max_steps)  # fmt: skip

    def on_step_begin(self, args, state, control, **kwargs):
        # global_step counts the steps already taken: the step beginning now is global_step + 1
        if state.is_world_process_zero and state.global_step + 1 == self.first and self.profiler is None:
            activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if self.device else [])]
            self.profiler = profile(activities=activities)
            self.profiler.start()
            self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if self.profiler is not None and state.global_step == self.last:
            self._finish(args.output_dir, state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.profiler is not None:  # the run ended before the range did (max_steps, early stopping)
            self._finish(args.output_dir, state.global_step)

    def _finish(self, output_dir: str, last: int) -> None:
        """Stop the profiler and write what it recorded; a profile that cannot be written never stops training."""
        if self.device:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - self.started
        self.profiler.stop()
        try:
            self._write(output_dir, last, seconds)
        except OSError as err:
            log.warning("profile_steps: the profile of steps %d-%d was not written: %s", self.first, last, err)
        self.profiler = None

    def _write(self, output_dir: str, last: int, seconds: float) -> None:
        """The table and the trace of steps ``first`` to ``last``."""
        name = f"steps-{self.first}-{last}"
        where = torch.cuda.get_device_name() if self.device else "CPU"
        header = f"optimizer steps {self.first}-{last} of {output_dir} on {where}: {seconds:.2f} s wall\n\n"
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.folder / f"{name}.txt") as handle:
            handle.write(header + operator_table(self.profiler, self.device) + "\n")
        trace_path = self.folder / f"trace-{name}.json.gz"
        with atomic_write(trace_path, "wb") as handle, scratch_folder("rectune-trace-") as scratch:
            raw = scratch / "trace.json"  # hundreds of MB on a GPU; a killed run's goes with the next
            self.profiler.export_chrome_trace(str(raw))
            if free_bytes(scratch) == 0:  # torch's exporter gives up on a full disk without a word: no file, or half
                raise OSError(errno.ENOSPC, f"no space left in the temporary folder {tempfile.gettempdir()} for the "
                              "raw trace (set TMPDIR to a folder on a disk with room)", str(raw))  # fmt: skip
            with raw.open("rb") as trace, gzip.GzipFile(fileobj=handle, mode="wb") as packed:
                shutil.copyfileobj(trace, packed)
        log.info("profiled steps %d-%d (%.2f s): %s", self.first, last, seconds, self.folder / f"{name}.txt")


def step_profiler(training_args: Any, profile_steps: list[int]) -> list[StepProfiler]:
    """The callback ``profile_steps`` asks for (none when it is empty), writing under ``output_dir/profile``."""
    if not profile_steps:
        return []
    return [StepProfiler(profile_steps[0], profile_steps[-1], Path(training_args.output_dir) / "profile")]
