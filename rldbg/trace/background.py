"""Tracing's background work runs at the lowest CPU priority: it uses what training leaves.

A traced process has two threads of rldbg's (the flusher, the memory sampler), and the driver
also the collector's listener threads (trace/server.py). None of their work is urgent: buffers
are bounded and counted, a batch a few ms late costs nothing. But on a small VM each timer
wake-up is about 100 µs of CPU (measured here: a thread waking 10 times a second to do nothing
used ~1 ms of CPU a second). At the training threads' own priority, a wake-up that lands on a
core running a training thread can preempt it, and a step whose cores are both busy gets longer.

Niced to 19 (Linux: per thread, by thread id), a waking tracing thread weighs less than the
training thread it lands beside: Ray starts its workers at nice 15 (RAY_worker_niceness), so
there the scheduler weighs the two 15 : 36; a driver keeps its shell's nice 0, 15 : 1024. The
kernel can then leave the core to training and run rldbg's work when a core is idle (a
synchronous RL step leaves idle time on every core). Nor is that work starved: next to one busy
training thread its weight still entitles it to 30% of a core (nice 15) or 1.5% (nice 0), more
than the 0.1–0.6% of the cores rldbg uses (bench/bench_trace_overhead.py's standing cost). What
this changes in a demo step is below what that bench resolves on a 2-core VM (about ±1.5% in a
120-round run, its A/A control). Raising
one's own nice value needs no privilege; undoing it does, which is why only threads that are
rldbg's alone are lowered.
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
