"""StopFlag: the background threads' sleep-and-stop signal (rldbg/trace/stopflag.py)."""
from __future__ import annotations

import threading
import time

from rldbg.trace.stopflag import StopFlag


def test_wait_times_out_while_not_set():
    f = StopFlag()
    t0 = time.monotonic()
    assert f.wait(0.05) is False
    assert time.monotonic() - t0 >= 0.04
    assert not f.is_set()


def test_set_wakes_a_waiting_thread_at_once_and_every_later_wait():
    f = StopFlag()
    woke = []
    t = threading.Thread(target=lambda: woke.append((f.wait(30), time.monotonic())))
    t.start()
    time.sleep(0.05)
    t0 = time.monotonic()
    f.set()
    t.join(5)
    assert woke and woke[0][0] is True and woke[0][1] - t0 < 5
    assert f.is_set() and f.wait(30) is True and f.wait(0) is True


def test_set_twice_and_from_two_threads_is_harmless():
    f = StopFlag()
    ts = [threading.Thread(target=f.set) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    f.set()
    assert f.wait(1) is True


def test_two_waiters_both_wake():
    f = StopFlag()
    out = []
    ts = [threading.Thread(target=lambda: out.append(f.wait(30))) for _ in range(2)]
    for t in ts:
        t.start()
    time.sleep(0.05)
    f.set()
    for t in ts:
        t.join(5)
    assert out == [True, True]
