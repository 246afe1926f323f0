"""What a store knows of a run besides its events, and the export needs: the tracks in first-seen
order (the export's pids and tids), the time origin, which process (node, clock) stands behind each
role/rank, each process's best clock offset estimate, drops, the rank slices that end each driver
call, and the controllers (each process that makes driver calls or marks steps: a track each on
the driver's process). Learnt a batch at a time from a spill as it goes into the store (see():
rldbg.store.ingest), kept in the store's processes and tracks tables, read back from them
(from_store(): rldbg.trace.export).
"""
from __future__ import annotations

from operator import itemgetter

from rldbg.trace.clock import batch_offset, uncertainty
from rldbg.trace.events import DRIVER_CALL

_TS, _ROLE_RANK = itemgetter(3), itemgetter(5, 6)


def process_key(batch: dict) -> str:
    """The process a spill batch came from: "host:pid"."""
    return f"{batch.get('host')}:{batch.get('pid')}"


class Tracks:
    """What the export knows besides the events (module docstring). Times are kept as recorded
    until finish() knows each process's clock offset."""

    def __init__(self, meta: dict):
        self.origin = int(meta.get("origin_ns") or 0)
        self.meta = meta
        self.roles: dict[str, int] = {"driver": 1}
        self.ranks: dict[str, set] = {"driver": {0}}
        self.rank_ends: dict = {}                 # flow -> {(role, rank): (ts, ts_end)}, aligned
        self.drops: dict[str, list] = {}          # "host:pid" -> [dropped, t_sent]
        self.procs: dict[str, dict] = {}          # "host:pid" -> where it runs and its clock
        self.rank_proc: dict[tuple, str] = {}     # (role, rank) -> "host:pid"
        self.first: dict[str, int] = {}           # "host:pid" -> its earliest timestamp
        self.offsets: dict[str, int] = {}         # "host:pid" -> ns to add to its timestamps
        self.n = 0
        self.slots: dict[tuple, int] = {}         # (role, rank) -> its place in bind ids (finish())
        # "host:pid" -> its controller track, for each process that made driver calls or marked steps (the driver,
        # VeRL's TaskRunner, an evaluation actor), in the order first seen: track 0 is "driver", the others
        # "controller pid N" (the store keeps their driver-role events on that track: rldbg.store.ingest).
        self.controllers: dict[str, int] = {}

    def see(self, meta: dict, evs) -> None:
        """One batch of a spill."""
        key = self.see_batch(meta)
        if evs:
            self.n += len(evs)
            ts = min(map(_TS, evs))
            if key not in self.first or ts < self.first[key]:
                self.first[key] = ts
            known = key in self.procs
            role_ranks = dict.fromkeys(map(_ROLE_RANK, evs))
            if ("driver", 0) in role_ranks and key not in self.controllers and any(
                    ev[0] == DRIVER_CALL or ev[1] == "step" for ev in evs):
                self.controllers[key] = len(self.controllers)
            for role, rank in role_ranks:   # first-seen order: stable pids
                if known:
                    self.rank_proc[(role, rank)] = key
                self.roles.setdefault(role, len(self.roles) + 1)
                self.ranks.setdefault(role, set()).add(rank)
        if meta.get("dropped"):
            self.drops[key] = [meta["dropped"], meta.get("t_sent", 0)]

    def see_batch(self, batch: dict) -> str:
        """Note the batch's process and its clock estimate; returns the process key."""
        key = process_key(batch)
        if batch.get("host") == "collector":   # rldbg's own loss records: on the collector's clock
            return key
        p = self.procs.setdefault(key, {"pid": batch.get("pid"), "host": batch.get("host"),
                                        "node_id": batch.get("node_id") or "", "node_ip": batch.get("node_ip") or "",
                                        "clock_offset_ns": None, "clock_uncertainty_ns": None})
        u = uncertainty(batch)
        if u is not None and (p["clock_uncertainty_ns"] is None or u < p["clock_uncertainty_ns"]):
            p["clock_offset_ns"], p["clock_uncertainty_ns"] = batch_offset(batch), u
        return key

    @classmethod
    def from_store(cls, conn, align: bool) -> "Tracks":
        """What see() learnt from the store's spill, read back from the store's tables, finished."""
        from rldbg.store import schema
        idx = cls(schema.get(conn, "meta") or {})
        keys = {}
        for pid, key, ppid, host, node, ip, off, unc, dropped, t_sent, first in conn.execute(
                "SELECT id, key, pid, host, node_id, node_ip, clock_offset_ns, clock_uncertainty_ns, dropped, "
                "t_sent, first_ts FROM processes ORDER BY id"):
            keys[pid] = key
            if node is not None:
                idx.procs[key] = {"pid": ppid, "host": host, "node_id": node, "node_ip": ip,
                                  "clock_offset_ns": off, "clock_uncertainty_ns": unc}
            if dropped:
                idx.drops[key] = [dropped, t_sent]
            if first is not None:
                idx.first[key] = first
        for role, rank, proc in conn.execute("SELECT role, rank, proc FROM tracks ORDER BY ord"):
            idx.roles.setdefault(role, len(idx.roles) + 1)
            idx.ranks.setdefault(role, set()).add(rank)
            if proc is not None:
                idx.rank_proc[(role, rank)] = keys[proc]
        idx.n = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        # The rank slices of each driver call, a later one winning for the same rank: the call
        # slices and the driver calls read in one scan of the events, those of a flow no call has left
        # out; no scan where no kind is a driver call's (a run of the user's own spans).
        calls = {kind: (ph == "D", (role, rank), keys[proc]) for kind, ph, role, rank, proc in conn.execute(
            "SELECT id, ph, role, rank, proc FROM kinds WHERE cat = 'call' AND ph IN ('X', 'D')")}
        rows = conn.execute("SELECT kind, flow, ts, ts + dur FROM events WHERE kind IN "
                            "(SELECT id FROM kinds WHERE cat = 'call' AND ph IN ('X', 'D')) ORDER BY seq"
                            ).fetchall() if any(d for d, _, _ in calls.values()) else ()
        called = {flow for kind, flow, _, _ in rows if calls[kind][0] and flow is not None}
        for kind, flow, start, end in rows:
            if flow in called and not calls[kind][0]:
                idx.rank_ends.setdefault(flow, {})[calls[kind][1]] = (start, end, calls[kind][2])
        idx.finish(align)
        return idx

    def finish(self, align: bool) -> None:
        """One offset per process, its best estimate (smallest round trip): the same shift for all
        its events keeps its spans nested (a clock drifting during the run is not followed)."""
        self.offsets = {k: (p["clock_offset_ns"] or 0) if align else 0 for k, p in self.procs.items()}
        for key, track in self.controllers.items():
            self.ranks["driver"].add(track)
            self.rank_proc[("driver", track)] = key
        for key, ts in self.first.items():
            ts += self.offsets.get(key, 0)
            if self.origin == 0 or ts < self.origin:
                self.origin = ts
        for ends in self.rank_ends.values():
            for rr, (start, end, key) in ends.items():
                ends[rr] = (start + (off := self.offsets.get(key, 0)), end + off)
        for key, d in self.drops.items():
            d[1] += self.offsets.get(key, 0)
        self.slots = {rr: i for i, rr in enumerate((role, rank) for role in self.roles
                                                   for rank in sorted(self.ranks.get(role, ())))}

    def start_args(self, aligned: bool) -> dict:
        """The args of the trace's start record: its origin, job, clocks and what was recorded."""
        meta = self.meta
        return {"origin_unix_ns": self.origin, "job_id": meta.get("job_id"), "format": "rldbg-1",
                "clock": dict(self.clock(), aligned=aligned),
                # what was recorded: every step, chosen steps, or a flight recorder's window
                "recorded": {"steps": meta.get("steps") or [], "window": meta.get("window") or 0,
                             "flight": meta.get("flight")}}

    def clock(self) -> dict:
        """The trace metadata on clocks: reference, worst uncertainty, per-process estimates."""
        us = [p["clock_uncertainty_ns"] for p in self.procs.values() if p["clock_uncertainty_ns"] is not None]
        return {"reference": "the collector's wall clock", "max_uncertainty_ns": max(us) if us else None,
                "processes": {k: {"node_id": p["node_id"], "offset_ns": p["clock_offset_ns"],
                                  "uncertainty_ns": p["clock_uncertainty_ns"]} for k, p in sorted(self.procs.items())}}
