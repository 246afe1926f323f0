"""Background memory sampler: one daemon thread per traced process, a sample at least every period.

Each tick records the full sample (probes.sample_full: the device's view; gpu_process, this
process's own bytes by NVML) and, per GPU the process uses, a counter "<gpu> memory": used and
total bytes and a series per process NVML sees on it ("pid 1234"), so a rollout server or a
stranger shows up, not only the ranks that trace. NVML is asked here, never at a call's edges. A
process without a GPU skips a tick where its hooks sampled it within the period (a busy worker).

It is handed the function that records an event (rldbg.trace.runtime.emit) instead of importing
the tracing runtime, which starts it: no import circle."""
from __future__ import annotations

import os
import threading
import time

from rldbg.context import current, identity
from rldbg.memory import nvml, probes
from rldbg.trace.background import lower_this_thread
from rldbg.trace.events import GPU, counter_event, memory_event
from rldbg.trace.stopflag import StopFlag


class Sampler:
    def __init__(self, hz: float, emit):
        self.period, self.emit, self.pid = 1.0 / hz, emit, os.getpid()
        self._stop = StopFlag()   # cheaper to wake 10 times a second than an Event
        self._t = threading.Thread(target=self._run, name="rldbg-mem-sampler", daemon=True)
        self._t.start()

    def _run(self) -> None:
        lower_this_thread()   # weighs less than training with the scheduler: rldbg/trace/background.py
        period_ns = int(self.period * 1e9)
        while not self._stop.wait(self.period):
            # Without a GPU (whose per-process bytes come from here only) a tick adds nothing where the
            # hooks sampled within the period, as at a busy worker's call edges: the series has its point.
            if probes._allocator() is None and time.monotonic_ns() - probes._own["last"][0] < period_ns:
                continue
            who, now = identity(), time.time_ns()
            role, step = who.roles[0], current().step
            m = probes.sample_full()
            gpus = nvml.by_process() if "cuda_allocated" in m else ()
            if gpus:
                m["gpu_process"] = sum(procs.get(self.pid, 0) for _, _, _, procs in gpus)
            self.emit(memory_event(now, role, who.rank, step, None, m))
            for gpu, used, total, procs in gpus:
                values = {"used": used, "total": total, **{f"pid {p}": b for p, b in sorted(procs.items())}}
                self.emit(counter_event(GPU, f"{gpu.label} memory", now, role, who.rank, step, None, values))

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=2)
