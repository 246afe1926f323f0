"""The collector: the one store every process ships its events to, in the driver.

Other processes reach it through the listener (trace/server.py), the driver's own events
in-process. Each batch is persisted on arrival; the newest LIVE_KEEP events stay in memory for
live readers (the TUI). The listener's threads and the driver share it under its lock.

Losses: every batch carries its process's cumulative loss counts and whether it is the last
(`final`). At close() the collector writes what the trace lost as events of its own (category
"rldbg"): "events lost" on each affected track, "process stopped reporting" for one that went
silent without its final batch, and one "rldbg trace losses" summary on the driver track.
"""
from __future__ import annotations

import functools
import os
import threading
import time
from collections import Counter, deque

from rldbg.trace.events import instant_event
from rldbg.trace.flight import LIVE_S, REASONS, Dumps
from rldbg.trace.spill import SpillWriter, decode_events, encode_events

LIVE_KEEP = 250_000   # events kept in memory for live queries (the TUI joins 200k back); the spill keeps all
LOSS_CAT = "rldbg"
UNSHIPPED = "still buffered when the trace stopped"
NO_EVENTS = encode_events([])


def _locked(method):
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return call


class Collector:
    def __init__(self, spill_dir: str, meta: dict):
        self._lock = threading.RLock()
        self.meta = meta
        self.closed, self.closing_ns = False, 0   # closing_ns: when stop() asked for the last events (ingest)
        # The flight recorder (meta["window"]) writes nothing until a trigger: no spill of the whole
        # run, only each dump's (rldbg.trace.flight).
        window = meta.get("window")
        self.writer = None if window else SpillWriter(spill_dir, meta)
        self.dumps = Dumps(os.path.dirname(meta.get("trace_path") or spill_dir) or ".", meta) if window else None
        self.live: deque = deque()   # (cursor of first event, events)
        self.n_live = 0
        self.total = 0               # events ever received by this collector
        self.procs: dict = {}        # "host:pid" -> counts, identity, last seen, final
        self.last_ingest_ns = 0
        self._losses: dict | None = None   # what the trace lost, once close() has counted it

    @_locked
    def config(self) -> dict:
        return self.meta

    @_locked
    def clock(self) -> tuple:
        """(receive, send) times on this clock: one round trip of a shipper's offset estimate
        (rldbg.trace.clock). The collector's clock is the trace's one clock."""
        return time.time_ns(), time.time_ns()

    @_locked
    def ingest(self, meta: dict, events: bytes) -> int:
        """One batch: the msgpack array of its events as the shipper packed it (rldbg.trace.spill),
        their count in meta["n"], written to the spill as is; b"" is a heartbeat."""
        key = f"{meta.get('host')}:{meta.get('pid')}"
        if self.closed:   # closed by stop(): late batches are not part of this trace
            if key in self.procs:
                self.procs[key]["told_closed"] = True
            return -1                # recorder.CLOSED: the sender goes quiet
        n = int(meta.get("n", 0)) if events else 0
        p = self.procs.setdefault(key, {"events": 0, "batches": 0, "dropped": 0, "lost": {}})
        changed = meta.get("lost") != p["lost"] or meta.get("final")
        if meta.get("dump") is not None and self.dumps is not None:
            self.dumps.take(key, meta, events, n)
            n = 0   # a window handed over goes to its dump only
        elif (n or changed) and self.writer is not None:   # heartbeats without news are not worth a spill line
            self.writer.write_raw({k: v for k, v in meta.items() if k != "n"}, events or NO_EVENTS)
        p["events"] += n
        p["batches"] += 1
        p["dropped"] = max(p["dropped"], meta.get("dropped", 0))
        p["lost"] = meta.get("lost") or p["lost"]
        p["last_seen_ns"] = time.time_ns()
        p["final"] = bool(meta.get("final"))
        p["pending"] = int(meta.get("pending") or 0)
        for k in ("role", "rank", "node_id", "node_ip", "clock_offset_ns", "clock_rtt_ns"):
            if meta.get(k) is not None:
                p[k] = meta[k]
        if n:
            self.live.append((self.total, n, events))   # bytes are decoded only if someone reads them
            self.total += n
            self.n_live += n
            while self.n_live - self.live[0][1] >= LIVE_KEEP:
                self.n_live -= self.live.popleft()[1]
            self.last_ingest_ns = time.time_ns()
        if self.dumps is None:   # once stop() asked, a sender with nothing left hears "closed" at once
            p["told_closed"] = told = bool(self.closing_ns) and not p["pending"] and not p["final"]
            return -1 if told else n
        if meta.get("step") is not None:
            p["step"] = meta["step"]
            newest = self.dumps.newest_step
            self.dumps.newest_step = meta["step"] if newest is None else max(newest, meta["step"])
        if meta.get("trigger"):   # a process saw a non-finite output or a rank's death in its window
            t = dict(meta["trigger"])
            self.dumps.request(str(t.pop("reason", "trigger")), t.pop("step", None), t, self._live())
        self.dumps.tick(self._live())
        # With the answer, the job's newest step: a process with no steps of its own files its
        # samples under it (rldbg.trace.window.Ring).
        return [n, self.dumps.wanted(key), self.dumps.newest_step]

    def _live(self) -> set:
        since = time.time_ns() - int(LIVE_S * 1e9)
        return {k for k, p in self.procs.items() if not p.get("final") and p.get("last_seen_ns", 0) >= since}

    @_locked
    def dump(self, reason: str = "manual", detail: dict | None = None, step=None) -> dict:
        """Open a flight-recorder dump; its status. ValueError when the trace keeps no window."""
        if self.dumps is None:
            raise ValueError("this trace records every step to its spill (no trace.window): there is no window "
                             "to dump; `rldbg export --address auto` writes what it has so far")
        if reason not in REASONS:
            raise ValueError(f"dump reason {reason!r}; accepted: {', '.join(REASONS)}")
        detail = dict(detail or {})
        step = step if step is not None else detail.pop("step", None)
        return self.dumps.request(reason, step, detail, self._live())

    @_locked
    def dump_status(self, did: int | None = None) -> dict | None:
        if self.dumps is None:
            return None
        self.dumps.tick(self._live())
        return self.dumps.status(did)

    @_locked
    def events_since(self, cursor: int = 0, limit: int = 50_000) -> tuple[int, list]:
        """Events after `cursor` (a count of events ever received) and the cursor to pass next."""
        out = []
        cursor = max(cursor, self.live[0][0] if self.live else self.total)
        for start, n, evs in self.live:
            if start + n <= cursor:
                continue
            evs = decode_events(evs)
            take = evs[cursor - start: cursor - start + limit - len(out)]
            out.extend(take)
            cursor += len(take)
            if len(out) >= limit:
                break
        return cursor, out

    @_locked
    def all_told_closed(self) -> bool:
        """Every process still running has heard that this trace is over (so it detaches at once
        and a later trace finds it free), the ones close() found silent aside."""
        gone = {s["process"] for s in (self._losses or {}).get("silent", ())}
        return all(p.get("final") or p.get("told_closed") or k in gone for k, p in self.procs.items())

    @_locked
    def stats(self) -> dict:
        return {"events": self.total, "processes": dict(self.procs),
                "dropped": sum(p["dropped"] for p in self.procs.values()),
                "last_ingest_ns": self.last_ingest_ns, "spill_dir": self.writer.dir if self.writer else None,
                "window": self.meta.get("window") or 0,
                "dumps": [d.status() for d in self.dumps.all] if self.dumps else []}

    @_locked
    def losses(self, silent_after_ns: int) -> dict:
        """What the trace lost: {"total", "by_cause", "processes": {key: {...}}, "silent": [...]}.
        A process is silent when its last batch is older than `silent_after_ns` and was not final."""
        by_cause, procs, silent = Counter(), {}, []
        for key, p in self.procs.items():
            causes = dict(p["lost"])
            if p.get("pending"):   # buffered there when it last reported, never shipped
                causes[UNSHIPPED] = causes.get(UNSHIPPED, 0) + p["pending"]
            by_cause.update(causes)
            n = sum(causes.values())
            who = {"process": key, "role": p.get("role"), "rank": p.get("rank")}
            if n:
                procs[key] = dict(who, lost=n, causes=causes)
            if not p.get("final") and p.get("last_seen_ns", 0) < silent_after_ns:
                silent.append(dict(who, last_seen_ns=p.get("last_seen_ns", 0)))
        return {"total": sum(by_cause.values()), "by_cause": dict(by_cause), "processes": procs, "silent": silent}

    @_locked
    def close(self, silent_after_ns: int = 0) -> dict:
        """Write the loss records and close the spill (the first call); returns stats() with "losses"."""
        if not self.closed:
            self.closed = True
            self._losses = self.losses(silent_after_ns)
            if self.writer is not None:
                if evs := self._loss_events(self._losses):
                    self.writer.write({"pid": "rldbg", "host": "collector", "dropped": 0, "events": evs})
                self.writer.close()
        return dict(self.stats(), losses=self._losses)

    def _loss_events(self, losses: dict) -> list:
        now = time.time_ns()
        evs = []

        def instant(name, ts, role, rank, args):
            role = role if role is not None else "driver"
            evs.append(instant_event(LOSS_CAT, name, int(ts or now), role, int(rank or 0), None, None, args))

        for key, p in losses["processes"].items():
            last = self.procs[key].get("last_seen_ns") or now
            instant("events lost", last, p["role"], p["rank"],
                    {"process": key, "lost": p["lost"], "causes": p["causes"]})
        for s in losses["silent"]:
            instant("process stopped reporting", s["last_seen_ns"], s["role"], s["rank"],
                    {"process": s["process"], "unsent_events": "unknown: it ended before its last flush"})
        if losses["total"] or losses["silent"]:
            instant("rldbg trace losses", now, "driver", 0,
                    {"total_lost": losses["total"], "by_cause": losses["by_cause"],
                     "processes_lost": sorted(losses["processes"]), "silent": [s["process"] for s in losses["silent"]]})
        return evs
