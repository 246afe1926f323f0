"""Tracing's own CPU in a running job, thread by thread: what a traced step's extra CPU is made of,
measured where it is spent instead of as a difference of two noisy totals.

rldbg's threads are named ("rldbg-flusher", "rldbg-mem-sampler", and in the driver the
collector's "rldbg-collector-accept" and one "rldbg-collector-conn" per connected process); the OS
does not know those names, so each process says which of its native thread ids carries which
(the workers through Ray's __ray_call__).
Recording itself runs on the training threads and is not in here (bench_trace.py measures it
per event).
"""
from __future__ import annotations

import os
import sys
import threading

import ray

# The workers cannot import this file (bench/ is not on their path): ship these functions whole.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

LABELS = {"rldbg-flusher": "flushers", "rldbg-mem-sampler": "samplers",
          "rldbg-collector-accept": "the collector", "rldbg-collector-conn": "the collector"}


def _named_threads() -> tuple:
    return os.getpid(), {t.native_id: t.name for t in threading.enumerate() if t.name in LABELS}


def schedstat(pid: int, tid: int, field: int = 0) -> int:
    """A field of /proc/<pid>/task/<tid>/schedstat: 0, ns on a core; RUN_DELAY, ns runnable but
    waiting for one."""
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[field])


RUN_DELAY = 1


def tracing_threads(hosts) -> list:
    """[(pid, tid, label)] of rldbg's threads in this process (the driver, where the collector
    lives) and in each actor of `hosts` (an actor listed twice, as colocated roles are, counts
    once). Ask once every process is connected: a collector thread started later is missed."""
    unique = {h._actor_id.hex(): h for h in hosts}.values()
    replies = [_named_threads()] + ray.get([h.__ray_call__.remote(lambda self: _named_threads()) for h in unique])
    return [(pid, tid, LABELS[name]) for pid, named in replies for tid, name in named.items()]


def cpu_ns(threads: list) -> dict:
    """{(pid, tid): CPU ns so far} of the threads given (a thread gone meanwhile is left out)."""
    out = {}
    for pid, tid, _ in threads:
        try:
            out[(pid, tid)] = schedstat(pid, tid)
        except (OSError, ValueError):
            pass
    return out


def used_by_label(threads: list, before: dict) -> dict:
    """{label: CPU ns since `before`} summed over the threads of each label."""
    now = cpu_ns(threads)
    out: dict = {}
    for pid, tid, label in threads:
        if (pid, tid) in now and (pid, tid) in before:
            out[label] = out.get(label, 0) + now[(pid, tid)] - before[(pid, tid)]
    return out
