"""Each SFT log entry's ``step_time``: the seconds its optimizer steps took, on average since the last log.

The trainer's ``train_runtime`` counts the first step, which on a GPU compiles kernels (Triton's, for TRL's
chunked loss) and settles the allocator; a throughput figure compared with a lean loop timed after warm-up
steps must leave it out. GRPO logs TRL's own ``step_time``; SFT logs none, so this callback adds it under
the same name. On a GPU the clock waits for the device at each step's end, so a step's queued kernels
count in that step and not the next.
"""

from __future__ import annotations

import time

import torch
from transformers import TrainerCallback


class StepClock(TrainerCallback):
    """Adds ``step_time`` (mean seconds an optimizer step took since the previous log) to each log entry."""

    def __init__(self) -> None:
        self._started = 0.0
        self._seconds: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self._started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        self._seconds.append(time.perf_counter() - self._started)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # the trainer appended this log's entry to the history just before calling back
        if self._seconds and state.log_history and "loss" in state.log_history[-1]:  # a training log
            state.log_history[-1]["step_time"] = sum(self._seconds) / len(self._seconds)
            self._seconds.clear()
