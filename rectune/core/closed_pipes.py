"""Standard output and error whose reader has gone: the run goes on, and what it would print there is dropped.

``python train/sft.py r.yaml | head``, or a pager quit before the run ends, closes the pipe's reading end; a run
left going after its terminal closed (``disown``, then a logout) writes to a terminal that hung up. The next write
there raised ``BrokenPipeError`` (or ``EIO``), a traceback that ended the run: training stopped mid-epoch, an
evaluation stopped after its report and before its W&B run and its model card's scores. The files a run writes
matter more than lines nobody can read any more, so the stream's descriptor is pointed at ``/dev/null`` instead,
and a broken standard output is said once on standard error.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import Any, TextIO

READER_GONE = (errno.EPIPE, errno.EIO)  # a pipe's reader exited; a terminal hung up (a disowned job, logged out)
GONE = (
    "{name}'s reader has gone (a pipe to head, a pager that quit, a closed terminal): the run goes on, its {name} "
    "dropped\n"
)


class ReaderTolerant:
    """``stream`` (``sys.stdout`` or ``sys.stderr``), whose writes and flushes survive the reader's leaving."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name
        self._dropped = False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as err:
            if err.errno not in READER_GONE:
                raise
            self._drop()
            return self._stream.write(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as err:
            if err.errno not in READER_GONE:
                raise
            self._drop()
            self._stream.flush()

    def _drop(self) -> None:
        """Point the stream's descriptor at /dev/null: what its buffer holds, and all that follows, goes there."""
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())
        os.close(null)
        if self._name == "stdout" and not self._dropped:  # said once, where two threads found it gone
            with contextlib.suppress(OSError, ValueError):  # stderr is gone too, or closed
                sys.stderr.write(GONE.format(name=self._name))
                sys.stderr.flush()
        self._dropped = True

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer: the stream's own
        return getattr(self._stream, name)


def tolerate_gone_readers() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (once: an entry script may be run twice in one process)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, ReaderTolerant):
            setattr(sys, name, ReaderTolerant(stream, name))
