"""What ``cpu_launch`` runs in place of ``python -m torch.distributed.run``: torchrun itself, less the traceback
it ends with when a signal stops it.

torchrun's agent turns a SIGTERM or SIGINT into a ``SignalException`` once its workers have stopped, and lets it
escape: after the workers had saved their step and said so in one line (``rectune.training.sigterm_checkpoint``),
the run ended in a 30-line traceback from torchrun's own code. Any other failure keeps torchrun's report.
"""

from __future__ import annotations

import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.run import main

if __name__ == "__main__":
    try:
        main()
    except SignalException as stopped:
        sys.exit(128 + int(stopped.sigval))  # the status a process the signal ended would have, as the shell reports
