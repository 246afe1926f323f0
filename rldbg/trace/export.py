"""Spill directory → Chrome JSON trace that Perfetto loads without import errors.

Two passes over the spill so memory stays bounded by calls, not events: pass 1 (_Index) learns
the tracks, the time origin, each process's clock offset and the rank slices that end each
driver call; pass 2 writes each event's text (rldbg.trace.chrome_text, which also holds the
layout: pids, tids, counter tracks, flows). Big spills are read by several processes side by
side (rldbg.trace.export_jobs); the file is the same.

Nodes and clocks: each rank's thread_name metadata carries the process behind it (pid, host,
node_id, node_ip, its clock offset and uncertainty) and its call slices carry node/ip; a process
serving several roles appears under each. All of a process's timestamps are shifted by its best
clock offset estimate (rldbg.trace.clock; the batches carry them): all times are the collector's
clock. The "rldbg trace start" instant's args hold the per-process estimates ("clock").
"""
from __future__ import annotations

import copy
import gzip
import os
import stat
import sys
from itertools import compress, repeat
from operator import itemgetter

from rldbg.trace import export_jobs
from rldbg.trace.chrome_text import Formatter, dumps, us
from rldbg.trace.clock import batch_offset, uncertainty
from rldbg.trace.events import DRIVER_CALL, SLICE
from rldbg.trace.load import no_gc
from rldbg.trace.spill import iter_records, read_meta

_CALL = "call"   # the category of a rank's slice serving a driver call, and of the driver call
_PH, _CAT, _TS, _ROLE_RANK, _FLOW = itemgetter(0), itemgetter(1), itemgetter(3), itemgetter(5, 6), itemgetter(9)
_FIRST = itemgetter(0)


def _key(batch: dict) -> str:
    return f"{batch.get('host')}:{batch.get('pid')}"


class _Index:
    """What pass 1 learns: tracks, rank slice ends per call, drops, the time origin, and which
    process (node, clock) stands behind each role/rank. Times are kept as recorded until
    finish() knows each process's clock offset."""

    def __init__(self, meta: dict):
        self.origin = int(meta.get("origin_ns") or 0)
        self.meta = meta
        self.roles: dict[str, int] = {"driver": 1}
        self.ranks: dict[str, set] = {"driver": {0}}
        self.rank_ends: dict[int, dict] = {}      # flow -> {(role, rank): ts_end}, from calls by ends_for()
        self.calls: list = []                     # ("host:pid", [(flow, role, rank, end ts)] of a batch's call slices) until ends_for()
        self.drops: dict[str, list] = {}          # "host:pid" -> [dropped, t_sent]
        self.procs: dict[str, dict] = {}          # "host:pid" -> where it runs and its clock
        self.rank_proc: dict[tuple, str] = {}     # (role, rank) -> "host:pid"
        self.first: dict[str, int] = {}           # "host:pid" -> its earliest timestamp
        self.offsets: dict[str, int] = {}         # "host:pid" -> ns to add to its timestamps
        self.n = 0
        self.kept: list | None = None   # pass 1's decoded batches, when few enough
        self.slots: dict[tuple, int] = {}         # (role, rank) -> its place in bind ids (finish())
        self.driver_flows: set = set()            # flows of the driver calls seen (pass 2 needs their rank_ends)
        # "host:pid" -> its controller track, for each process that made driver calls or marked
        # steps (the driver, VeRL's TaskRunner, an evaluation actor), in the order first seen:
        # track 0 is "driver", the others "controller pid N" (their driver-role events move there).
        self.controllers: dict[str, int] = {}

    def see(self, meta: dict, evs) -> None:
        """One batch of pass 1."""
        key = self.see_batch(meta)
        if evs:
            self.see_batch_events(key, evs)
        if meta.get("dropped"):
            self.drops[key] = [meta["dropped"], meta.get("t_sent", 0)]

    def see_batch(self, batch: dict) -> str:
        """Note the batch's process and its clock estimate; returns the process key."""
        key = _key(batch)
        if batch.get("host") == "collector":   # rldbg's own loss records: on the collector's clock
            return key
        p = self.procs.setdefault(key, {"pid": batch.get("pid"), "host": batch.get("host"),
                                        "node_id": batch.get("node_id") or "", "node_ip": batch.get("node_ip") or "",
                                        "clock_offset_ns": None, "clock_uncertainty_ns": None})
        u = uncertainty(batch)
        if u is not None and (p["clock_uncertainty_ns"] is None or u < p["clock_uncertainty_ns"]):
            p["clock_offset_ns"], p["clock_uncertainty_ns"] = batch_offset(batch), u
        return key

    def see_batch_events(self, key: str, evs) -> None:
        """A batch's (valid) events, taken column-wise at C speed where it can be."""
        calls = list(compress(evs, map(_CALL.__eq__, map(_CAT, evs))))
        role_ranks = dict.fromkeys(map(_ROLE_RANK, evs))
        if ("driver", 0) in role_ranks and key not in self.controllers and any(
                ev[0] == DRIVER_CALL or ev[1] == "step" for ev in evs):
            self.controllers[key] = len(self.controllers)
        self._learn(key, len(evs), min(map(_TS, evs)), role_ranks,
                    [(ev[9], ev[5], ev[6], ev[3] + ev[4]) for ev in calls if ev[0] == SLICE and ev[9] is not None],
                    map(_FLOW, compress(calls, map(DRIVER_CALL.__eq__, map(_PH, calls)))))

    def _learn(self, key: str, n: int, ts: int, role_ranks, calls: list, driver_flows) -> None:
        self.n += n
        if key not in self.first or ts < self.first[key]:
            self.first[key] = ts
        known = key in self.procs
        for role, rank in role_ranks:   # first-seen order: stable pids
            if known:
                self.rank_proc[(role, rank)] = key
            if role not in self.roles:
                self.roles[role] = len(self.roles) + 1
            self.ranks.setdefault(role, set()).add(rank)
        # A batch's call slices kept as (flow, role, rank, end): which of them end which driver
        # call is worked out later (ends_for), only for the driver calls there are, not for every
        # rank call of a spill whose driver calls may be few or none.
        if calls:
            self.calls.append((key, calls))
        self.driver_flows.update(driver_flows)
        self.driver_flows.discard(None)

    def ends_for(self, flows: set) -> dict:
        """{flow: {(role, rank): (end ts as recorded, "host:pid")}} of the rank call slices of
        `flows`, a later slice winning for the same rank as in arrival order; the kept call
        events are let go (called once, when the driver calls of the whole spill are known)."""
        ends: dict = {}
        calls, self.calls = self.calls, []
        for key, slices in calls:
            for flow, role, rank, end in compress(slices, map(flows.__contains__, map(_FIRST, slices))):
                ends.setdefault(flow, {})[(role, rank)] = (end, key)
        return ends

    def merge(self, later: "_Index") -> None:
        """Fold in what pass 1 learnt from the part of the spill right after this one's (a
        reader working beside this one: rldbg.trace.export_jobs). The result is what one pass
        over both parts in a row learns: first sightings keep their order, later batches win
        where a later batch overrides, a process keeps its best clock estimate."""
        for role in later.roles:
            if role not in self.roles:
                self.roles[role] = len(self.roles) + 1
        for role, ranks in later.ranks.items():
            self.ranks.setdefault(role, set()).update(ranks)
        self.calls += later.calls   # rank_ends come from these only after the merge (ends_for)
        self.drops.update(later.drops)
        for key, p in later.procs.items():
            mine = self.procs.setdefault(key, p)
            u = p["clock_uncertainty_ns"]
            if mine is not p and u is not None and (mine["clock_uncertainty_ns"] is None or u < mine["clock_uncertainty_ns"]):
                mine["clock_offset_ns"], mine["clock_uncertainty_ns"] = p["clock_offset_ns"], u
        self.rank_proc.update(later.rank_proc)
        self.driver_flows |= later.driver_flows
        for key in later.controllers:
            self.controllers.setdefault(key, len(self.controllers))
        for key, ts in later.first.items():
            if key not in self.first or ts < self.first[key]:
                self.first[key] = ts
        self.n += later.n

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
            for rr, (end, key) in ends.items():
                ends[rr] = end + self.offsets.get(key, 0)
        for key, d in self.drops.items():
            d[1] += self.offsets.get(key, 0)
        self.slots = {rr: i for i, rr in enumerate((role, rank) for role in self.roles
                                                   for rank in sorted(self.ranks.get(role, ())))}

    def for_flows(self, flows: set) -> "_Index":
        """A copy for a reader formatting part of the spill: rank slice ends only for the
        driver calls in `flows` (the ones it expands), not a million of them."""
        part = copy.copy(self)
        part.rank_ends = {f: self.rank_ends[f] for f in flows if f in self.rank_ends}
        part.kept, part.calls = None, []
        return part

    def bind_id(self, flow, role: str, rank: int) -> int | None:
        """The flow id joining the driver's send/recv for `flow` to role/rank's slice: computed,
        not handed out in order, so readers formatting parts of the spill side by side agree.
        None for a flow that is not a small non-negative int (not rldbg's own): no arrow."""
        slot = self.slots.get((role, rank))
        if type(flow) is not int or flow < 0 or slot is None:
            return None
        fid = flow * len(self.slots) + slot + 1
        return fid if fid < 1 << 63 else None

    def clock(self) -> dict:
        """The trace metadata on clocks: reference, worst uncertainty, per-process estimates."""
        us = [p["clock_uncertainty_ns"] for p in self.procs.values() if p["clock_uncertainty_ns"] is not None]
        return {"reference": "the collector's wall clock", "max_uncertainty_ns": max(us) if us else None,
                "processes": {k: {"node_id": p["node_id"], "offset_ns": p["clock_offset_ns"],
                                  "uncertainty_ns": p["clock_uncertainty_ns"]}
                              for k, p in sorted(self.procs.items())}}


KEEP_DECODED = 2_000_000   # events pass 1 keeps for pass 2 (decoded about 0.5 GB); beyond, pass 2 rereads


def _index(spill_dir: str, align: bool = True, damage: list | None = None, pieces: list | None = None,
           keep: int = KEEP_DECODED) -> _Index:
    """Pass 1 over the spill, or over `pieces` of it (rldbg.trace.spill.split; then unfinished:
    the caller merges the parts and finishes). The decoded batches are kept for pass 2 up to
    `keep` events; beyond, pass 2 reads the spill again."""
    idx = _Index(read_meta(spill_dir))
    kept: list | None = []
    for meta, evs in iter_records(spill_dir, damage, tuples=True, pieces=pieces):
        idx.see(meta, evs)
        if kept is not None:
            kept.append((meta, evs))
            if idx.n > keep:
                kept = None
    if pieces is None:
        idx.rank_ends = idx.ends_for(idx.driver_flows)
        idx.finish(align)
    idx.kept = kept
    return idx


# Events joined into one write: ~75 KB of text, under glibc's mmap threshold, so each write's
# buffers reuse the same heap memory; a batch's 3 MB were mapped and faulted in afresh each time.
_WRITE_EVENTS = 512


def write_events(f, idx: _Index, spill_dir: str, pieces: list | None = None) -> int:
    """Pass 2: the events of the spill (or of `pieces` of it) as JSON lines, each ending ",\n";
    returns how many were written."""
    fmt, written = Formatter(idx), 0
    if idx.kept is not None:
        # Each kept batch let go of right after it is written: freed while still in the cache,
        # not a million cold events at the end.
        kept, idx.kept = idx.kept, None
        kept.reverse()
        batches = map(kept.pop, repeat(-1, len(kept)))
    else:
        # What pass 1 found damaged it has recorded: nothing is recorded twice.
        batches = iter_records(spill_dir, None, tuples=True, pieces=pieces)
    controllers = idx.controllers
    for meta, evs in batches:
        if not evs:
            continue
        key = _key(meta)
        off = idx.offsets.get(key, 0)
        track = controllers.get(key)
        if track:   # a controller beside the first: its driver-role events on a track of its own
            evs = [(*ev[:6], track, *ev[7:]) if ev[5] == "driver" else ev for ev in evs]
        parts = fmt.batch(evs, off)
        for i in range(0, len(parts), _WRITE_EVENTS):
            f.write((",\n".join(parts[i:i + _WRITE_EVENTS]) + ",\n").encode("utf-8", "replace"))
        written += len(parts)
    return written


def _open(path: str):
    """The output, checked by _prepare_out before any work (export_spill). A regular file already
    there is removed first, not truncated: ext4 writes a file that was truncated and written
    again back to disk as it is closed (auto_da_alloc), 0.05 s per 150 MB the export waited for,
    where a new file's pages go to disk later, in the background. A symlink, a FIFO or a device
    at the path is written through as before."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:   # nothing there, or not ours to remove: opening it says what is wrong
        pass
    if path.endswith(".gz"):
        # Level 1: about twice level 3's speed for a few % more bytes; the trace is written once.
        return gzip.open(path, "wb", compresslevel=1)
    return open(path, "wb")


def export_spill(spill_dir: str, out_path: str, extra=None, align_clocks: bool = True,
                 damage: list | None = None, jobs: int | None = None) -> dict:
    """Write the trace; returns {"events": n_in, "written": n_out, "path": out_path}.
    align_clocks=False writes each process's own timestamps (to see what the correction did).
    `damage`, when given, receives the spill's damaged regions (rldbg.trace.spill.iter_records).
    `extra(put, locate, origin_ns)` may add events of its own before the trailer: put(event dict)
    writes one, locate(role, rank) -> (pid, tid, clock offset ns to add to that rank's own
    timestamps) or None places it on a rank's track. The
    exporter knows nothing of who adds them (rldbg.trace.session passes the torch.profiler merge).
    `jobs`: processes reading and formatting the spill side by side (rldbg.trace.export_jobs);
    None picks by the spill's size and the cores here. The file is the same either way."""
    if jobs is not None and (type(jobs) is not int or jobs < 1):
        raise ValueError(f"jobs must be a positive int or None, got {jobs!r}")
    read_meta(spill_dir)   # a spill that is not one is said first, before the output's directory is made
    _prepare_out(out_path)
    n_jobs = export_jobs.choose(spill_dir, jobs)
    with no_gc():
        if n_jobs > 1:
            done = export_jobs.export(sys.modules[__name__], spill_dir, out_path, extra, align_clocks, damage, n_jobs)
            if done is not None:
                return done
        return _export(spill_dir, out_path, extra, align_clocks, damage)


def _check_out(path: str) -> None:
    if not (path.endswith(".json") or path.endswith(".json.gz")):
        raise ValueError(f"output {path!r} must end in .json or .json.gz")


def _prepare_out(path: str) -> None:
    """The output's directory made, before any work: a path that cannot be written is a
    ValueError naming it and why, not a traceback after the spill was read."""
    _check_out(path)
    if os.path.isdir(path):
        raise ValueError(f"cannot write {path!r}: it is a directory")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:   # a file where a directory should be
        raise ValueError(f"cannot write {path!r}: {e.filename!r} is not a directory") from None
    except OSError as e:
        raise ValueError(f"cannot write {path!r}: {e.strerror} ({e.filename})") from None


def _export(spill_dir: str, out_path: str, extra, align_clocks: bool, damage: list | None) -> dict:
    idx = _index(spill_dir, align_clocks, damage)
    return write_trace(out_path, idx, align_clocks, extra, lambda f: write_events(f, idx, spill_dir))


def write_trace(out_path: str, idx: _Index, align_clocks: bool, extra, events) -> dict:
    """The file around the events: track metadata and the trace-start record first, then
    `events(f)` (writes the event lines, returns how many), then what `extra` adds and the
    loss records, last the trailer."""
    written = 0
    with _open(out_path) as f:
        def put(obj: dict) -> None:
            nonlocal written
            f.write((dumps(obj) + ",\n").encode("utf-8", "replace"))
            written += 1

        f.write(b"[\n")
        for role, pid in idx.roles.items():
            put({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": role}})
            for rank in sorted(idx.ranks.get(role, ())):
                tname = f"rank {rank}" if role != "driver" else "driver" if rank == 0 else (
                    f"controller pid {_where(idx, role, rank).get('pid', '?')}")
                put({"ph": "M", "pid": pid, "tid": rank + 1, "name": "thread_name",
                     "args": dict(_where(idx, role, rank), name=tname)})
        put({"ph": "i", "s": "g", "pid": 1, "tid": 1, "name": "rldbg trace start", "ts": "0.000",
             "args": {"origin_unix_ns": idx.origin, "job_id": idx.meta.get("job_id"), "format": "rldbg-1",
                      "clock": dict(idx.clock(), aligned=align_clocks),
                      # what was recorded: every step, chosen steps, or a flight recorder's window
                      "recorded": {"steps": idx.meta.get("steps") or [], "window": idx.meta.get("window") or 0,
                                   "flight": idx.meta.get("flight")}}})
        written += events(f)
        if extra is not None:
            def locate(role, rank):
                if rank not in idx.ranks.get(role, ()):
                    return None
                return idx.roles[role], rank + 1, idx.offsets.get(idx.rank_proc.get((role, rank)), 0)
            extra(put, locate, idx.origin)
        total = 0
        for key, (dropped, t_sent) in sorted(idx.drops.items()):
            total += dropped
            rel = max(t_sent - idx.origin, 0)
            put({"ph": "i", "s": "t", "pid": 1, "tid": 1, "cat": "rldbg", "name": "events dropped",
                 "ts": us(rel), "args": {"process": key, "dropped": dropped}})
        # Last line carries no trailing comma; a writer that dies before it leaves a truncated
        # array, which Perfetto and rldbg report still read.
        f.write((dumps({"ph": "C", "pid": 1, "name": "rldbg dropped events", "ts": "0.000",
                         "args": {"total": total}}) + "\n]\n").encode("utf-8"))
        written += 1
    return {"events": idx.n, "written": written, "path": out_path}


def _where(idx: _Index, role: str, rank: int) -> dict:
    """The process behind role/rank's track: pid, host, node, clock ({} when no event named it)."""
    p = idx.procs.get(idx.rank_proc.get((role, rank)), {})
    return {k: p[k] for k in ("pid", "host", "node_id", "node_ip", "clock_offset_ns", "clock_uncertainty_ns")
            if k in p}

