"""One clock for the trace: each process's offset to the collector's wall clock, NTP-style.

The flusher thread (never the recording path) times round trips to the collector: t0 sent, the
collector's receive and send times t1, t2, t3 back. Then
    offset = ((t1 - t0) + (t2 - t3)) / 2       (add to a local time to get the collector's)
    rtt    = (t3 - t0) - (t2 - t1)
and the true offset lies within offset ± rtt / 2 whatever the path's asymmetry, so the sample with
the smallest round trip is the best. A few samples at connect, then one every SYNC_S; each batch
carries the best of the last KEEP. The exporter shifts ALL of a process's events by the best
estimate any of its batches carried: one shift per process keeps its spans nested (a per-batch
shift would tear a span from its children), at the price of not following a drifting clock.
"""
from __future__ import annotations

import time
from collections import deque

CONNECT_SAMPLES = 5     # round trips at connect: the first on a fresh connection is slow
SYNC_S = 5.0            # then one round trip this often, from the flusher thread
KEEP = 8                # the best of the last KEEP samples is the estimate

# Batch meta keys (recorder.Shipper writes them, export reads them).
OFFSET, RTT = "clock_offset_ns", "clock_rtt_ns"


class ClockSync:
    """The offset estimate of this process to the collector (one per Shipper)."""

    def __init__(self):
        self.samples: deque = deque(maxlen=KEEP)   # (rtt_ns, offset_ns)
        self.last = 0.0                            # time.monotonic() of the last attempt

    def sync(self, link, n: int = 1) -> None:
        """Up to `n` round trips over the shipper's link (recorder.py), until one gets no answer."""
        for _ in range(n):
            self.last = time.monotonic()
            t0 = time.time_ns()
            try:
                t1, t2 = link.clock()
            except Exception:
                return
            t3 = time.time_ns()
            self.samples.append(((t3 - t0) - (t2 - t1), ((t1 - t0) + (t2 - t3)) // 2))

    def due(self) -> bool:
        return time.monotonic() - self.last >= SYNC_S

    def reset(self) -> None:
        """A new connection: earlier samples measured another path."""
        self.samples.clear()
        self.last = 0.0

    def meta(self) -> dict:
        """{OFFSET, RTT} of the best current sample, {} before the first answer."""
        if not self.samples:
            return {}
        rtt, off = min(self.samples)
        return {OFFSET: off, RTT: rtt}


def batch_offset(batch: dict) -> int:
    """The offset (ns) to add to a spill batch's timestamps; 0 when its process had no estimate."""
    return int(batch.get(OFFSET) or 0)


def uncertainty(batch: dict) -> int | None:
    """Half the round trip of the estimate a batch was corrected with; None when there was none."""
    rtt = batch.get(RTT)
    return None if rtt is None else (int(rtt) + 1) // 2
