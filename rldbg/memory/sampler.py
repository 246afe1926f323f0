"""Background memory sampler: one daemon thread per traced process at a fixed rate."""
from __future__ import annotations

import threading
import time

from rldbg.context import current
from rldbg.memory.probes import sample
from rldbg.trace.events import memory_event


class Sampler:
    def __init__(self, hz: float):
        self.period = 1.0 / hz
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name="rldbg-mem-sampler", daemon=True)
        self._t.start()

    def _run(self) -> None:
        from rldbg.trace.runtime import emit
        from rldbg.instrument import identity
        while not self._stop.wait(self.period):
            role, rank = identity()
            ctx = current()
            emit(memory_event(time.time_ns(), role, rank, ctx.step, None, sample()))

    def stop(self) -> None:
        self._stop.set()
        self._t.join(timeout=2)


def start_sampler(hz: float) -> Sampler | None:
    return Sampler(hz) if hz > 0 else None
