"""A SIGTERM while training saves the step under way as a checkpoint, then stops the run.

Schedulers end a job with SIGTERM and kill it a grace period later: Slurm at its time limit or on preemption
(``--signal=TERM@120`` sends it two minutes early), Kubernetes with ``terminationGracePeriodSeconds``, ``kill``.
The run had stopped at once, so its rerun resumed from the last ``save_steps`` checkpoint and trained the steps
since again. Now the step under way ends, is saved as ``checkpoint-N`` (no evaluation is started: the grace
period goes to the save) and the run exits with status 143, not finished, so its rerun resumes from that step.
The processes of a distributed run stop at the same step: the signal reaches each at its own moment, so each
optimizer step ends with one all-reduce of the flag (a few bytes beside a step). transformers'
``enable_jit_checkpoint`` decides on each process alone, which could leave them in different collectives; this
handler replaces its. A SIGTERM that follows is the same request: torchrun's agent passes the one it got on to
its workers, which had theirs from the scheduler already. Ctrl-C or SIGKILL stops at once, and so does a SIGTERM
before or after training (``rectune.core.cli``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

from transformers import TrainerCallback

ASKED = b"SIGTERM: the step under way ends and is saved as a checkpoint, then the run stops (Ctrl-C: at once)\n"


class CheckpointOnSigterm(TrainerCallback):
    """Ask the Trainer to save and stop at the end of the step a SIGTERM came in (``stopped_at``: that step)."""

    def __init__(self) -> None:
        self.asked = False
        self.stopped_at: int | None = None
        self._previous: Any = signal.SIG_DFL

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._previous = signal.signal(signal.SIGTERM, self._ask)

    def _ask(self, _signum: int, _frame: object) -> None:
        if not self.asked:
            self.asked = True
            if os.environ.get("RANK", "0") == "0":  # one line a run, not one a process
                # a handler may interrupt logging's own write; this cannot interleave. A stderr nobody reads any
                # more (`| head`) raised EPIPE here, in whatever the training step was doing
                with contextlib.suppress(OSError):
                    os.write(2, ASKED)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not asked_on_any_process(self.asked, args.device):
            return
        self.stopped_at = state.global_step
        control.should_save = True
        control.should_evaluate = False
        control.should_training_stop = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.restore()

    def restore(self) -> None:
        """Put the handler from before training back (training raised, or ended: either way a SIGTERM stops now)."""
        if signal.getsignal(signal.SIGTERM) == self._ask:
            signal.signal(signal.SIGTERM, self._previous)


def checkpoint_on_sigterm(trainer: Any) -> CheckpointOnSigterm:
    """Give ``trainer`` the callback (``parse_recipe`` turns ``enable_jit_checkpoint`` off, whose handler would
    take the signal first and, left after training, a SIGTERM after it)."""
    callback = CheckpointOnSigterm()
    trainer.add_callback(callback)
    return callback


def asked_on_any_process(asked: bool, device: Any) -> bool:
    """``asked`` on this process or any other of a distributed run (the same answer on every process)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return asked
    flag = torch.tensor([int(asked)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def stopped_text(output_dir: str, step: int, max_steps: int) -> str:
    return (
        f"{output_dir}: stopped by SIGTERM after step {step} of {max_steps}, saved as checkpoint-{step}; "
        "run the same command again to resume from it"
    )
