"""Per-process bounded recorder and the background thread that ships it to the collector.

Recording appends a tuple to a deque (atomic under the GIL, no lock). A daemon flusher drains it
every `interval` seconds and sends batches fire-and-forget to the collector actor. Nothing here
ever waits on the collector while training runs: when the buffer is full, or too many batches are
still unacknowledged (collector slow), or the collector is gone, events are dropped and counted;
the count travels with the next batch that does get through and ends up in the trace.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque

MAX_INFLIGHT = 4
BATCH = 20_000


class Recorder:
    def __init__(self, capacity: int = 1 << 20):
        self.capacity = capacity
        self.buf: deque = deque()
        self.dropped = 0          # buffer full or batch refused
        self.recorded = 0         # shipped successfully (acknowledged or in flight)

    def emit(self, ev: tuple) -> None:
        if len(self.buf) >= self.capacity:
            self.dropped += 1
            return
        self.buf.append(ev)

    def drain(self, limit: int = BATCH) -> list:
        out, pop = [], self.buf.popleft
        try:
            for _ in range(min(limit, len(self.buf))):
                out.append(pop())
        except IndexError:
            pass
        return out


class Shipper:
    """Owns the flusher thread for one process and one collector handle."""

    def __init__(self, recorder: Recorder, collector, interval: float = 0.1, on_gone=None):
        self.rec, self.collector, self.interval = recorder, collector, interval
        self.on_gone = on_gone
        self.inflight: list = []
        self.gone = False
        self.meta = {"pid": os.getpid(), "host": socket.gethostname()}
        self._stop = threading.Event()
        self._lock = threading.Lock()   # flusher vs. an explicit flush() from the recording thread
        self._thread = threading.Thread(target=self._run, name="rldbg-flusher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.flush(block=False)
            if self.gone and self.on_gone is not None:
                # The collector was stopped: go quiet so a later session can be found again.
                self.on_gone()
                return

    def _reap(self, timeout: float) -> None:
        import ray
        if not self.inflight:
            return
        ready, self.inflight = ray.wait(self.inflight, num_returns=len(self.inflight), timeout=timeout)
        for ref in ready:
            try:
                ray.get(ref, timeout=0)
            except Exception:
                self.gone = True   # collector died or was stopped: stay quiet, count drops

    def flush(self, block: bool = False, timeout: float = 10.0) -> None:
        with self._lock:
            try:
                self._reap(0)
                while self.rec.buf:
                    batch = self.rec.drain()
                    if self.gone or len(self.inflight) >= MAX_INFLIGHT:
                        self.rec.dropped += len(batch)
                        continue
                    meta = dict(self.meta, dropped=self.rec.dropped, t_sent=time.time_ns())
                    self.inflight.append(self.collector.ingest.remote(meta, batch))
                    self.rec.recorded += len(batch)
                    if block:
                        self._reap(timeout)
                if block:
                    # A last empty batch carries the final drop count.
                    meta = dict(self.meta, dropped=self.rec.dropped, t_sent=time.time_ns())
                    if not self.gone:
                        self.inflight.append(self.collector.ingest.remote(meta, []))
                    self._reap(timeout)
            except Exception:
                # Ray shutting down under us: tracing must never take the process with it.
                self.gone = True

    def close(self, flush: bool = True) -> None:
        self._stop.set()
        if flush:
            self.flush(block=True)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
