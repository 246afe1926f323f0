"""Per-process bounded recorder and the background thread that ships it to the collector.

Recording packs the event (spill.pack_event) and appends it to a deque (atomic under the GIL, no
lock). A daemon flusher drains it every `interval` seconds over its link (a wire.Connection, or in
the driver a server.LocalLink), one acknowledged batch at a time: training never waits on the
collector, and a burst up to the buffer's size ships on later rounds (bench/bench_trace_loss.py).
Events are lost only when the buffer is full, a batch was on the wire when the connection broke, or
the collector is gone; each cause is counted per process and travels, cumulative, with every batch
into the trace. Every round sends something (an empty batch when there is nothing to ship), so the
collector tells a dead process (silent, no final batch) from an idle one; a normal exit sends a
final batch.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
import time
from collections import deque
from itertools import repeat, starmap

from rldbg.context import current
from rldbg.trace.background import lower_this_thread
from rldbg.trace.clock import CONNECT_SAMPLES, ClockSync
from rldbg.trace.spill import encode_events, join_packed, pack_event
from rldbg.trace.stopflag import StopFlag
from rldbg.trace.window import Ring, stack_events, trigger_in
from rldbg.trace.wire import NotSent

BATCH = 20_000
RELOOK_S = 0.5          # while the collector is unreachable: how often to connect again
GIVE_UP_S = 15.0        # ... and how long before this process stops trying (tracing ended)
EXIT_TIMEOUT_S = 3.0    # a process exiting waits at most this long for its last batch's answer

# Loss causes, as counted in `lost` and shown in the trace.
CLOSED = -1               # the collector's answer once its trace was stopped
OTHER_SESSION = object()   # relookup()'s answer when the collector found belongs to a later trace
BUFFER_FULL, IN_FLIGHT, COLLECTOR_GONE = ("buffer full", "on the wire when the connection to the collector broke",
                                          "collector gone")


class Recorder:
    def __init__(self, capacity: int = 1 << 20):
        self.capacity = capacity
        self.buf: deque = deque()
        self.dropped = 0          # buffer full (rldbg.api's inlined emit counts here too)
        self.lost: dict = {}      # other causes -> count

    def emit(self, ev: tuple) -> None:
        if len(self.buf) >= self.capacity:
            self.dropped += 1
            return
        self.buf.append(pack_event(ev))

    def drain(self, limit: int = BATCH) -> list:
        """Up to `limit` of the oldest events (packed), taken out. Popped at C speed (starmap calls
        popleft without a Python step per event): only the shipper pops, under its lock, and
        recording only appends, so the length read here can only have grown by the time it pops."""
        return list(starmap(self.buf.popleft, repeat((), min(limit, len(self.buf)))))

    def lose(self, cause: str, n: int) -> None:
        if n:
            self.lost[cause] = self.lost.get(cause, 0) + n

    def losses(self) -> dict:
        return {**self.lost, BUFFER_FULL: self.dropped} if self.dropped else dict(self.lost)


class Shipper:
    """Owns the flusher thread for one process and its link to the collector.

    relookup() -> link|OTHER_SESSION|None connects again after the link broke (workers: to the
    same session's collector, found by name). on_gone() runs when it stays unreachable."""

    def __init__(self, recorder: Recorder, link, interval: float = 0.1, on_gone=None, relookup=None,
                 node: dict | None = None, policy=None):
        self.rec, self.link, self.interval = recorder, link, interval
        # What ships (rldbg.trace.window): None, every event; a StepFilter, the chosen steps; a
        # Ring, the last N steps, handed over only when the collector asks for a dump.
        self.policy = policy
        self.answer = None   # the collector's answer to the last batch
        self.on_gone, self.relookup = on_gone, relookup
        self.gone, self.gone_since, self._last_look = False, 0.0, 0.0
        self.meta = {"pid": os.getpid(), "host": socket.gethostname(), **(node or {})}
        self.clock = ClockSync()
        self._stop = StopFlag()
        self._lock = threading.Lock()   # the flusher vs. an explicit flush() from the recording thread
        self._thread = threading.Thread(target=self._run, name="rldbg-flusher", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    def _run(self) -> None:
        lower_this_thread()   # weighs less than training with the scheduler: trace/background.py
        with self._lock:
            self._send(self._meta(), b"")   # at once: stop() waits for every process it knows of
            self.clock.sync(self.link, CONNECT_SAMPLES)   # before the first batch of events ships
        self.flush()
        while not self._stop.wait(self.interval):
            if self.clock.due() and not self.gone:
                with self._lock:
                    self.clock.sync(self.link)
            self.flush()
            if self.gone and time.monotonic() - self.gone_since > GIVE_UP_S and self.on_gone is not None:
                # The collector was stopped: go quiet so a later session can be found again.
                self.on_gone()
                return

    def _at_exit(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            with contextlib.suppress(OSError):   # already closed: flush() finds the link gone
                self.link.settimeout(EXIT_TIMEOUT_S)   # a stuck collector must not hold up the exit
            self.flush(final=True)

    def _meta(self, final: bool = False) -> dict:
        lost, who = self.rec.losses(), current()
        # pending: what is still buffered here; stop() waits for it to reach 0 and counts the rest.
        return dict(self.meta, role=who.role, rank=who.rank, **self.clock.meta(), dropped=sum(lost.values()),
                    lost=lost, t_sent=time.time_ns(), final=final, pending=len(self.rec.buf))

    def _send(self, meta: dict, payload: bytes, batch: list = ()) -> bool:
        """One batch, acknowledged (True), put back (the link was found broken before it went
        out) or counted lost."""
        try:
            got = self.link.ingest(meta, payload)
        except NotSent:
            self.rec.buf.extendleft(reversed(batch))   # oldest first again; ships on the next link
            self._set_gone()
            return False
        except Exception:
            # The link broke with this batch unacknowledged: whether it reached the spill is
            # unknown, so it counts as lost (it may be in the trace as well).
            self.rec.lose(IN_FLIGHT, len(batch))
            self._set_gone()
            return False
        if got == CLOSED:
            self._set_gone()
            self.gone_since = -GIVE_UP_S   # the trace was stopped: go quiet at once
            return False
        self.answer = got
        return True

    def _set_gone(self) -> None:
        if not self.gone:
            self.gone, self.gone_since = True, time.monotonic()
            with contextlib.suppress(Exception):
                self.link.close()

    def _try_relookup(self) -> None:
        if self.relookup is None or self.gone_since < 0 or time.monotonic() - self._last_look < RELOOK_S:
            return
        self._last_look = time.monotonic()
        link = self.relookup()   # never raises (runtime._connect)
        if link is OTHER_SESSION:
            self.gone_since = -GIVE_UP_S   # a later trace session: stop at once, it is not ours
        elif link is not None:
            self.link, self.gone = link, False
            self.clock.reset()
            self.clock.sync(self.link, CONNECT_SAMPLES)

    def flush(self, final: bool = False) -> None:
        """Ship what is buffered now (what is recorded meanwhile waits for the next round), then
        a heartbeat if nothing else went (or `final`: this process's last word); each batch waits
        for its acknowledgement."""
        with self._lock:
            try:
                if self.gone:
                    self._try_relookup()
                if isinstance(self.policy, Ring):
                    self._flush_ring(self.policy, final)
                else:
                    self._flush_batches(final)
            except Exception:
                # Ray or the interpreter shutting down under us: tracing must never take the process with it.
                self._set_gone()

    def _flush_batches(self, final: bool) -> None:
        todo = len(self.rec.buf)
        sent = False
        while todo > 0 and not self.gone:
            batch = self.rec.drain(min(todo, BATCH))
            todo -= len(batch)
            if self.policy is not None:   # step windows: the chosen steps only
                batch = self.policy.select(batch)
                if not batch:
                    continue
            # Packed by each process, not by the collector, which only appends the bytes to the spill and
            # so keeps up with many producers.
            sent = self._send(dict(self._meta(), n=len(batch)), join_packed(batch), batch) or sent
        if self.gone and self.rec.buf and (self.relookup is None or self.gone_since < 0):
            # No link will come back (the trace was stopped): what is buffered never ships.
            # While one may (a worker connecting again), the buffer keeps it, bounded.
            self.rec.lose(COLLECTOR_GONE, len(self.rec.drain(len(self.rec.buf))))
        if not self.gone and (not sent or final):
            # A heartbeat (and the cumulative loss count) every round, even with nothing to ship.
            self._send(self._meta(final), b"")

    def _flush_ring(self, ring: Ring, final: bool) -> None:
        """The flight recorder's round: the new events join the window; a heartbeat tells the
        collector the newest step (and any trigger seen); a dump asked for in the answer takes the
        window (which stays for a later one)."""
        trigger = trigger_in(ring.add(self.rec.drain(len(self.rec.buf))))
        if self.gone:
            return
        meta = dict(self._meta(final), step=ring.newest, window_events=len(ring.events))
        if trigger:
            meta["trigger"] = trigger
        self.answer = None
        self._send(meta, b"")
        got = self.answer if isinstance(self.answer, (list, tuple)) else ()
        asked = got[1] if len(got) >= 2 else None
        if len(got) >= 3 and (got[2] is None or type(got[2]) is int):
            ring.job_step = got[2]
        if isinstance(asked, dict) and asked.get("dump") is not None:
            self._hand_over(ring, asked)

    def _hand_over(self, ring: Ring, asked: dict) -> None:
        events = ring.window(asked.get("step"))
        if asked.get("reason") == "hang":   # where this process's threads are right now
            events += stack_events(ring.newest)
        did = asked["dump"]
        for i in range(0, max(len(events), 1), BATCH):
            part = events[i:i + BATCH]
            last = i + BATCH >= len(events)
            self._send(dict(self._meta(), n=len(part), dump=did, dump_done=last), encode_events(part) if part else b"")

    def close(self, flush: bool = True) -> None:
        self._stop.set()
        if flush:
            self.flush(final=True)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self._set_gone()
