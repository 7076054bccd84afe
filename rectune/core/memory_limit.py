"""A memory limit on work whose size a stranger's input decides.

A chat template is a program its model's author wrote, and Jinja's sandbox bounds one ``range``, not what a
loop builds: a template that doubles a string forty times asks for a terabyte. Linux overcommits memory, so
the doublings that fit may be granted and written until the kernel's OOM killer ends a process, with no line
at all. Capping the process's address space (``RLIMIT_AS``) while the block runs makes the allocation past
the cap fail at once as a ``MemoryError``, and what the block built is freed as the error unwinds it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from rectune.core.io import RecTuneError

STATM = Path("/proc/self/statm")  # Linux: the process's address space in pages, first


def address_space() -> int | None:
    """The bytes of address space the process holds, or None where the platform does not say (no /proc)."""
    try:
        return int(STATM.read_text(encoding="utf-8").split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def memory_limit(extra_bytes: int, message: str) -> Iterator[None]:
    """Stop the block with ``RecTuneError(message)`` when it asks for more than ``extra_bytes`` of address space
    beyond what the process held as it began, or for more than the machine grants. The cap holds for the whole
    process, so only the main thread sets it (another thread's block, or one where no /proc says what the
    process holds, is capped by the machine only), and the limit set before is set again after."""
    held = address_space()
    limits = None
    if held is not None and threading.current_thread() is threading.main_thread():
        import resource  # where /proc is, so is resource

        limits = resource.getrlimit(resource.RLIMIT_AS)
        caps = [held + extra_bytes, *(limit for limit in limits if limit != resource.RLIM_INFINITY)]
        resource.setrlimit(resource.RLIMIT_AS, (min(caps), limits[1]))  # a tighter limit set before stays
    try:
        yield
    except MemoryError:
        raise RecTuneError(message) from None
    finally:
        if limits is not None:
            resource.setrlimit(resource.RLIMIT_AS, limits)
