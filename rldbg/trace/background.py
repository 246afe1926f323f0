"""Tracing's background work runs at the lowest CPU priority: it uses what training leaves.

None of it is urgent (buffers are bounded and counted), but on a small VM each timer wake-up is
about 100 µs of CPU, and at training's own priority a wake-up landing on a core that runs a
training thread can preempt it. Niced to 19 (Linux: per thread, by thread id), a waking tracing
thread weighs 15 : 36 against a Ray worker's training thread (nice 15), 15 : 1024 against a
driver's (nice 0), so the kernel runs rldbg's work when a core is idle, yet still grants it far
more than the 0.1-0.6% of the cores it uses (bench/bench_trace_overhead.py). Raising one's own
nice value needs no privilege, undoing it does: only threads that are rldbg's alone are lowered.
"""
from __future__ import annotations

import os
import threading

NICE = 19   # the lowest priority a normal thread can have


def lower_this_thread() -> bool:
    """The calling thread to nice NICE; False where the platform has no per-thread nice."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        return True
    except (AttributeError, OSError):
        return False
