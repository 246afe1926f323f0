"""The background memory sampler (rldbg.memory.sampler) on a process without a GPU: a tick that
finds a sample the recording hooks took within the period adds nothing and is skipped, so a busy
worker (a sample at every call's edges) does not pay for a second series of the same bytes; a
process whose hooks are quiet is sampled at the rate asked for. And the RSS probe they share reads
the process's own entry after a fork."""
from __future__ import annotations

import threading
import time

from rldbg.memory import probes
from rldbg.memory.sampler import Sampler

HZ = 20.0


def _ticks_while(busy: bool, seconds: float) -> int:
    got, lock = [], threading.Lock()

    def emit(ev):
        with lock:
            got.append(ev)

    sampler = Sampler(HZ, emit)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if busy:
                probes.sample()   # what worker_call and transition take at their edges
            time.sleep(0.005)
    finally:
        sampler.stop()
    with lock:
        return len(got)


def test_ticks_are_skipped_while_the_hooks_sample_and_taken_when_they_are_quiet():
    assert probes._allocator() is None   # CPU-only torch here: the skip applies
    quiet = _ticks_while(False, 1.0)
    busy = _ticks_while(True, 1.0)
    # 20 Hz for a second: ~20 ticks when quiet (a loaded machine delays some); while the hooks
    # sample every 5 ms a tick only fires where the main thread stalled for a whole period.
    assert quiet >= 8, quiet
    assert busy <= 2, busy


def test_a_forked_child_reads_its_own_rss_not_its_parents():
    """The probe keeps /proc/self/statm open; a child forked after a read must not go on reading
    the parent's entry through the inherited descriptor (Ray and multiprocessing fork workers)."""
    import mmap
    import os

    parent = probes.rss_bytes()   # opens the descriptor here, before the fork
    assert parent > 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child maps and touches 256 MiB of new pages, then says what its probe reads
        try:
            # From the child's own first read: a child starts without its parent's file-backed pages.
            before = probes.rss_bytes()
            block = mmap.mmap(-1, 256 << 20)
            for at in range(0, len(block), mmap.PAGESIZE):
                block[at] = 1
            os.write(w, str(probes.rss_bytes() - before).encode())
        finally:
            os._exit(0)
    os.close(w)
    grown = int(os.read(r, 64) or b"0")
    os.waitpid(pid, 0)
    os.close(r)
    assert grown > 200 << 20
