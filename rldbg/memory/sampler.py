"""Background memory sampler: one daemon thread per traced process at a fixed rate.

Each tick records the process's full memory sample (rldbg.memory.probes.sample_full: the device's
view included; gpu_process, this process's own bytes by NVML) and, for each GPU the process uses,
a counter "<gpu> memory" with the GPU's used and total bytes and a series per process NVML sees on
it ("pid 1234"): a rollout server or a stranger on the GPU shows up there, not only the ranks that
trace. NVML is asked here, off the training thread, never at a call's edges.

It is handed the function that records an event (rldbg.trace.runtime.emit) instead of importing
the tracing runtime, which starts it: no import circle."""
from __future__ import annotations

import os
import threading
import time

from rldbg.context import current, identity
from rldbg.memory import nvml
from rldbg.memory.probes import sample_full
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
        while not self._stop.wait(self.period):
            who, now = identity(), time.time_ns()
            role, step = who.roles[0], current().step
            m = sample_full()
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


def start_sampler(hz: float, emit) -> Sampler | None:
    """A sampler recording through `emit(event)` `hz` times a second; None when hz <= 0."""
    return Sampler(hz, emit) if hz > 0 else None
