"""A time limit on work whose length a stranger's input decides.

Some inputs run code paths that never end rather than fail: a regular expression in an adapter's
``adapter_config.json`` that backtracks catastrophically (``(.*)*x``) is matched by PEFT against every module
name, and took hours on one name. Python's regular expression engine, like Python code, checks for signals
as it runs, so an alarm interrupts it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from rectune.core.io import RecTuneError


class _Expired(BaseException):
    """Raised by the alarm; a BaseException, so no ``except Exception`` in the limited code swallows it."""


@contextlib.contextmanager
def time_limit(seconds: float, message: str) -> Iterator[None]:
    """Stop the block with ``RecTuneError(message)`` when it runs past ``seconds``. Signals reach the main
    thread only: in another thread the block runs without a limit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise _Expired

    previous = signal.signal(signal.SIGALRM, expire)
    pending = signal.setitimer(signal.ITIMER_REAL, seconds)  # another alarm's, set again after (not shortened)
    try:
        yield
    except _Expired:
        raise RecTuneError(message) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        signal.setitimer(signal.ITIMER_REAL, *pending)
