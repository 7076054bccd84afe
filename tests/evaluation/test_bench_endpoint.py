"""bench-endpoint's memory column: a live process's peak resident memory, read from Linux's /proc."""

import os
from pathlib import Path

from perf.bench_endpoint import peak_memory_gib


def test_the_peak_is_this_processs_and_none_for_a_process_that_is_gone():
    if not Path("/proc/self/status").is_file():  # no /proc (macOS): the column stays empty, not wrong
        assert peak_memory_gib(os.getpid()) is None
        return
    lasting = bytearray(256 * 2**20)  # 256 MiB touched: the peak holds at least that
    lasting[::4096] = b"\x01" * len(lasting[::4096])
    peak = peak_memory_gib(os.getpid())
    assert peak is not None and peak >= 0.25
    assert peak_memory_gib(2**22 + 1) is None  # past Linux's highest process id
