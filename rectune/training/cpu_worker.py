"""What each CPU worker of ``cpu_launch`` runs: the training script, with DeepSpeed's CPU-only build skipped.

    python -m torch.distributed.run ... -m rectune.training.cpu_worker train/sft.py RECIPE [--flag value ...]

DeepSpeed's CPU accelerator compiles a shared-memory all-reduce (``deepspeed_shm_comm``) with the machine's
C++ compiler when a worker joins its process group: 45 s on two idle cores, over 90 s on busy ones, again for
every new environment. Only DeepSpeed's inference all-reduce calls it; training reduces through gloo. Marking
the op unbuildable (DeepSpeed keeps one ``__compatible_ops__`` dict, so the mark holds) skips the build.
"""

from __future__ import annotations

import os
import runpy
import sys


def skip_deepspeed_shared_memory_build() -> None:
    """Tell DeepSpeed its shared-memory all-reduce cannot be built, before Accelerate initialises it."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def main() -> None:
    script = sys.argv[1]
    if os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true":
        skip_deepspeed_shared_memory_build()
    # what the script sees when torchrun runs it directly: its own name and flags, its folder first on the
    # path (not the working directory that `python -m` put there)
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
