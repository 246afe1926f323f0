"""Background memory sampler: one daemon thread per traced process at a fixed rate.

It is handed the function that records an event (rldbg.trace.runtime.emit) instead of importing
the tracing runtime, which starts it: no import circle."""
from __future__ import annotations

import threading
import time

from rldbg.context import current, identity
from rldbg.memory.probes import sample
from rldbg.trace.background import lower_this_thread
from rldbg.trace.events import memory_event
from rldbg.trace.stopflag import StopFlag


class Sampler:
    def __init__(self, hz: float, emit):
        self.period, self.emit = 1.0 / hz, emit
        self._stop = StopFlag()   # cheaper to wake 10 times a second than an Event
        self._t = threading.Thread(target=self._run, name="rldbg-mem-sampler", daemon=True)
        self._t.start()

    def _run(self) -> None:
        lower_this_thread()   # weighs less than training with the scheduler: rldbg/trace/background.py
        while not self._stop.wait(self.period):
            who = identity()
            self.emit(memory_event(time.time_ns(), who.roles[0], who.rank, current().step, None, sample()))

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=2)


def start_sampler(hz: float, emit) -> Sampler | None:
    """A sampler recording through `emit(event)` `hz` times a second; None when hz <= 0."""
    return Sampler(hz, emit) if hz > 0 else None
