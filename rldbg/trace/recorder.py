"""Per-process bounded recorder and the background thread that ships it to the collector.

Recording appends a tuple to a deque (atomic under the GIL, no lock). A daemon flusher drains it
every `interval` seconds and sends batches to the collector actor. Nothing here ever waits on the
collector while training runs: only the flusher thread waits. Backpressure: at most MAX_INFLIGHT
unacknowledged batches per process; while that many are in flight, the rest stays in the buffer
and ships on the next round, so a burst up to the buffer's size is shipped, not dropped
(bench/bench_trace_loss.py measures the limits). Events are lost only when the buffer is full, a
batch was in flight when the collector died, or the collector is gone; each cause is counted per
process (`lost`) and travels, cumulative, with every batch that gets through, ending in the trace.

Every batch also names where its process runs (pid, host, node_id, node_ip) and carries the
current estimate of its clock's offset to the collector (rldbg.trace.clock, measured by this
thread at connect and every few seconds; the exporter applies it, recording stays as cheap).

Every round sends something (an empty batch when there is nothing to ship): the collector tells a
process that died (no final batch, silent since) from one that is merely idle. A process exiting
normally sends a last batch marked final (atexit).
"""
from __future__ import annotations

import atexit
import os
import socket
import threading
import time
from collections import deque
from itertools import repeat, starmap

from rldbg.trace.background import lower_this_thread
from rldbg.trace.clock import CONNECT_SAMPLES, ClockSync
from rldbg.trace.spill import encode_events
from rldbg.trace.stopflag import StopFlag

MAX_INFLIGHT = 4
BATCH = 20_000
RELOOK_S = 0.5          # while the collector is gone: how often to look for its replacement
GIVE_UP_S = 15.0        # ... and how long before this process stops looking (tracing ended)

# Loss causes, as counted in `lost` and shown in the trace.
CLOSED = -1               # the collector's answer once its trace was stopped
OTHER_SESSION = object()   # relookup()'s answer when the collector found belongs to a later trace
BUFFER_FULL, IN_FLIGHT, COLLECTOR_GONE = "buffer full", "in flight when the collector died", "collector gone"


class Recorder:
    def __init__(self, capacity: int = 1 << 20):
        self.capacity = capacity
        self.buf: deque = deque()
        self.dropped = 0          # buffer full (rldbg.api's inlined emit counts here too)
        self.lost: dict = {}      # other causes -> count
        self.recorded = 0         # shipped (acknowledged or in flight)

    def emit(self, ev: tuple) -> None:
        if len(self.buf) >= self.capacity:
            self.dropped += 1
            return
        self.buf.append(ev)

    def drain(self, limit: int = BATCH) -> list:
        """Up to `limit` of the oldest events, taken out. Popped at C speed (starmap calls
        popleft without a Python step per event): only the shipper pops, under its lock, and
        recording only appends, so the length read here can only have grown by the time it pops."""
        return list(starmap(self.buf.popleft, repeat((), min(limit, len(self.buf)))))

    def lose(self, cause: str, n: int) -> None:
        if n:
            self.lost[cause] = self.lost.get(cause, 0) + n

    def losses(self) -> dict:
        out = dict(self.lost)
        if self.dropped:
            out[BUFFER_FULL] = self.dropped
        return out


def _identity() -> dict:
    try:
        from rldbg.context import current
        c = current()
        return {"role": c.role, "rank": c.rank}
    except Exception:
        return {}


class Shipper:
    """Owns the flusher thread for one process and one collector handle.

    relookup() -> handle|None finds the collector again after it died (the driver restarts it;
    workers look it up by name, same session only). on_gone() runs when it stays gone."""

    def __init__(self, recorder: Recorder, collector, interval: float = 0.1, on_gone=None, relookup=None,
                 node: dict | None = None):
        self.rec, self.collector, self.interval = recorder, collector, interval
        self.on_gone, self.relookup = on_gone, relookup
        self.inflight: list = []          # [(ref, n_events)]
        self.gone = False
        self.gone_since = 0.0
        self._last_look = 0.0
        self.meta = {"pid": os.getpid(), "host": socket.gethostname(), **(node or {})}
        self.clock = ClockSync()
        self._stop = StopFlag()
        self._lock = threading.Lock()   # flusher vs. an explicit flush() from the recording thread
        self._thread = threading.Thread(target=self._run, name="rldbg-flusher", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    def _run(self) -> None:
        lower_this_thread()   # weighs less than training with the scheduler: trace/background.py
        self._hello()   # at once: stop() waits for every process it knows of
        self.clock.sync(self.collector, CONNECT_SAMPLES)   # before the first batch of events ships
        self.flush(block=False)
        while not self._stop.wait(self.interval):
            if self.clock.due() and not self.gone:
                self.clock.sync(self.collector)
            self.flush(block=False)
            if self.gone and time.monotonic() - self.gone_since > GIVE_UP_S:
                if self.on_gone is not None:
                    # The collector was stopped: go quiet so a later session can be found again.
                    self.on_gone()
                    return

    def _hello(self) -> None:
        with self._lock:
            try:
                self.inflight.append((self.collector.ingest.remote(self._meta(), []), 0))
            except Exception:
                self._set_gone()

    def _at_exit(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            self.flush(block=True, timeout=3.0, final=True)

    def _meta(self, final: bool = False) -> dict:
        lost = self.rec.losses()
        # pending: what is still buffered here; stop() waits for it to reach 0 and counts the rest.
        return dict(self.meta, **_identity(), **self.clock.meta(), dropped=sum(lost.values()), lost=lost, t_sent=time.time_ns(),
                    final=final, pending=len(self.rec.buf))

    def _reap(self, timeout: float, want: int = 0) -> None:
        """Collect acknowledgements; wait up to `timeout` until at most `want` are in flight."""
        import ray
        if not self.inflight:
            return
        refs = [r for r, _ in self.inflight]
        need = max(len(refs) - want, 0)
        if timeout and need:
            ready, _ = ray.wait(refs, num_returns=need, timeout=timeout)
        else:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        ready = set(ready)
        keep = []
        for ref, n in self.inflight:
            if ref not in ready:
                keep.append((ref, n))
                continue
            try:
                if ray.get(ref, timeout=0) == CLOSED:
                    self._set_gone()
                    self.gone_since = -GIVE_UP_S   # the trace was stopped: go quiet at once
            except Exception:
                # The collector died with this batch unacknowledged: count it lost.
                self.rec.recorded -= n
                self.rec.lose(IN_FLIGHT, n)
                self._set_gone()
        self.inflight = keep

    def _set_gone(self) -> None:
        if not self.gone:
            self.gone, self.gone_since = True, time.monotonic()

    def _try_relookup(self) -> None:
        if self.relookup is None or self.gone_since < 0 or time.monotonic() - self._last_look < RELOOK_S:
            return
        self._last_look = time.monotonic()
        try:
            handle = self.relookup()
        except Exception:
            handle = None
        if handle is OTHER_SESSION:
            self.gone_since = -GIVE_UP_S   # a later trace session: stop at once, it is not ours
        elif handle is not None:
            self.collector, self.gone, self.inflight = handle, False, []
            self.clock.reset()   # resampled on the flusher's next round

    def flush(self, block: bool = False, timeout: float = 10.0, final: bool = False) -> None:
        deadline = time.monotonic() + timeout
        with self._lock:
            try:
                self._reap(0)
                if self.gone:
                    self._try_relookup()
                while self.rec.buf and not self.gone:
                    if len(self.inflight) >= MAX_INFLIGHT:
                        # Backpressure: wait (only this thread) for the collector to catch up.
                        left = deadline - time.monotonic() if block else self.interval
                        self._reap(max(left, 0.01), want=MAX_INFLIGHT - 1)
                        if len(self.inflight) >= MAX_INFLIGHT:
                            if block and time.monotonic() < deadline:
                                continue
                            break   # the rest ships next round; the buffer bounds what waits
                        continue
                    batch = self.rec.drain()
                    # Packed here (msgpack: a few hundred ns per event, against microseconds for
                    # JSON), not in the collector: the one collector only appends the bytes to the
                    # spill, so it keeps up with many producers.
                    payload = encode_events(batch)
                    self.inflight.append((self.collector.ingest.remote(dict(self._meta(), n=len(batch)), payload),
                                          len(batch)))
                    self.rec.recorded += len(batch)
                if self.gone and self.rec.buf:
                    self.rec.lose(COLLECTOR_GONE, len(self.rec.drain(len(self.rec.buf))))
                if not self.gone and (not self.inflight or block or final):
                    # A heartbeat (and the cumulative loss count) every round, even with nothing to ship.
                    self.inflight.append((self.collector.ingest.remote(self._meta(final), []), 0))
                if block:
                    self._reap(max(deadline - time.monotonic(), 0.01))
            except Exception:
                # Ray shutting down under us: tracing must never take the process with it.
                self._set_gone()

    def close(self, flush: bool = True) -> None:
        self._stop.set()
        if flush:
            self.flush(block=True, final=True)
            if self.gone and self.relookup is not None:
                # The collector died: the last counts must still reach its replacement.
                self._last_look = 0.0
                self.flush(block=True, final=True)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
