"""The collector: the one store every process ships its events to.

A Ray actor named f"{NAME_PREFIX}{job_id}" in namespace NAMESPACE, pinned to the driver's node
(it writes the spill directory there). Each batch is persisted on arrival and kept in memory for
live readers (the TUI): `events_since(cursor)`, `stats()`.
"""
from __future__ import annotations

import time

from rldbg.trace.spill import SpillWriter

NAMESPACE = "rldbg"
NAME_PREFIX = "rldbg-collector-"
LIVE_KEEP = 1_000_000   # events kept in memory for live queries; the spill keeps everything


def collector_name(job_id: str) -> str:
    return f"{NAME_PREFIX}{job_id}"


class Collector:
    def __init__(self, spill_dir: str, meta: dict):
        self.meta = meta
        self.writer = SpillWriter(spill_dir, meta)
        self.live: list = []
        self.base = 0            # cursor of live[0]
        self.procs: dict = {}    # (host, pid) -> counts
        self.last_ingest_ns = 0

    def config(self) -> dict:
        return self.meta

    def ingest(self, meta: dict, events: list) -> int:
        if self.writer.f is None:   # closed by stop(): late batches are not part of this trace
            return 0
        self.writer.write(dict(meta, events=events))
        key = f"{meta.get('host')}:{meta.get('pid')}"
        p = self.procs.setdefault(key, {"events": 0, "batches": 0, "dropped": 0})
        p["events"] += len(events)
        p["batches"] += 1
        p["dropped"] = max(p["dropped"], meta.get("dropped", 0))
        self.live.extend(events)
        if len(self.live) > LIVE_KEEP:
            cut = len(self.live) - LIVE_KEEP
            del self.live[:cut]
            self.base += cut
        self.last_ingest_ns = time.time_ns()
        return len(events)

    def events_since(self, cursor: int = 0, limit: int = 50_000) -> tuple[int, list]:
        """Events after `cursor` (a count of events ever received) and the cursor to pass next."""
        start = max(cursor - self.base, 0)
        chunk = self.live[start:start + limit]
        return self.base + start + len(chunk), chunk

    def stats(self) -> dict:
        return {"events": self.base + len(self.live), "processes": dict(self.procs),
                "dropped": sum(p["dropped"] for p in self.procs.values()),
                "last_ingest_ns": self.last_ingest_ns, "spill_dir": self.writer.dir}

    def close(self) -> dict:
        self.writer.close()
        return self.stats()
