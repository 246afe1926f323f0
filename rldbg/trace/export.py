"""Spill directory → Chrome JSON trace that Perfetto loads without import errors.

Layout (Perfetto pitfalls in /work/shared/FACTS.md): one process per role with small int pids
and process_name metadata (the driver is pid 1), one thread per rank (tid = rank + 1, named
"rank N"); counters are per-process tracks named "rank N <counter> <series>". Timestamps are
integer ns relative to the origin, written as exact 3-decimal µs. Each driver call becomes
call > dispatch > send→rank i, call > wait > recv←rank i, and the flow for rank i runs
send → the rank's slice → recv with flow v2 (one bind_id per call and rank, flow_in+flow_out on
the rank slice). Two passes over the spill so memory stays bounded by calls, not events.

Nodes and clocks: each rank's thread_name metadata carries the process behind it (pid, host,
node_id, node_ip, its clock offset and uncertainty) and its call slices carry node/ip; a process
serving several roles appears under each. All of a process's timestamps are shifted by its best
clock offset estimate (rldbg.trace.clock; the batches carry them): all times are the collector's
clock. The "rldbg trace start" instant's args hold the per-process estimates ("clock").
"""
from __future__ import annotations

import copy
import gzip
import importlib
import json
import os
import sys
from json.encoder import c_make_encoder, encode_basestring
from itertools import repeat
from operator import itemgetter

import orjson

from rldbg.trace import export_jobs
from rldbg.trace.clock import batch_offset, uncertainty
from rldbg.trace.events import DRIVER_CALL, INSTANT, SLICE, decode
from rldbg.trace.load import no_gc
from rldbg.trace.spill import iter_records, read_meta

_dumps = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
# The C encoder built once (JSONEncoder.encode builds one per call): the same output as _dumps.
_enc = c_make_encoder(None, str, encode_basestring, None, ":", ",", False, False, True)


_TS, _ROLE_RANK = itemgetter(3), itemgetter(5, 6)
_ojdumps = orjson.dumps


def _args_json(args: dict) -> str:
    """An event's args as JSON: the bytes _dumps writes, made by orjson (about 5x faster here)
    wherever orjson writes the same bytes, by the stdlib's C encoder where it may not: NaN and
    Infinity (orjson writes null), floats below 1e-4 (orjson writes them without an exponent),
    keys that are not strings, ints beyond 64 bits and lone surrogates (orjson refuses those).
    The guards also send some args orjson would have written the same way (a None, a string
    holding "e-") to the stdlib: slower, never different."""
    try:
        s = _ojdumps(args, default=str).decode()   # looked into as str: `in` on bytes costs 8x here
    except TypeError:
        return "".join(_enc(args, 0))
    if "null" in s or "e-" in s or ".0000" in s:
        return "".join(_enc(args, 0))
    return s


def _us(ns: int) -> str:
    q, r = divmod(ns, 1000)
    return f"{q}.{r:03d}"


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
        self.rank_ends: dict[int, dict] = {}      # flow -> {(role, rank): ts_end}
        self.drops: dict[str, list] = {}          # "host:pid" -> [dropped, t_sent]
        self.procs: dict[str, dict] = {}          # "host:pid" -> where it runs and its clock
        self.rank_proc: dict[tuple, str] = {}     # (role, rank) -> "host:pid"
        self.first: dict[str, int] = {}           # "host:pid" -> its earliest timestamp
        self.offsets: dict[str, int] = {}         # "host:pid" -> ns to add to its timestamps
        self.n = 0
        self.kept: list | None = None   # pass 1's decoded batches, when few enough
        self.slots: dict[tuple, int] = {}         # (role, rank) -> its place in bind ids (finish())
        self.driver_flows: set = set()            # flows of the driver calls seen (pass 2 needs their rank_ends)

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
        self.n += len(evs)
        ts = min(map(_TS, evs))
        if key not in self.first or ts < self.first[key]:
            self.first[key] = ts
        known = key in self.procs
        for role, rank in dict.fromkeys(map(_ROLE_RANK, evs)):   # first-seen order: stable pids
            if known:
                self.rank_proc[(role, rank)] = key
            if role not in self.roles:
                self.roles[role] = len(self.roles) + 1
            self.ranks.setdefault(role, set()).add(rank)
        ends = self.rank_ends
        for ev in evs:
            if ev[1] == "call" and ev[9] is not None:
                if ev[0] == SLICE:
                    ends.setdefault(ev[9], {})[(ev[5], ev[6])] = (ev[3] + ev[4], key)
                elif ev[0] == DRIVER_CALL:
                    self.driver_flows.add(ev[9])

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
        for flow, ends in later.rank_ends.items():
            self.rank_ends.setdefault(flow, {}).update(ends)
        self.drops.update(later.drops)
        for key, p in later.procs.items():
            mine = self.procs.setdefault(key, p)
            u = p["clock_uncertainty_ns"]
            if mine is not p and u is not None and (mine["clock_uncertainty_ns"] is None or u < mine["clock_uncertainty_ns"]):
                mine["clock_offset_ns"], mine["clock_uncertainty_ns"] = p["clock_offset_ns"], u
        self.rank_proc.update(later.rank_proc)
        self.driver_flows |= later.driver_flows
        for key, ts in later.first.items():
            if key not in self.first or ts < self.first[key]:
                self.first[key] = ts
        self.n += later.n

    def finish(self, align: bool) -> None:
        """One offset per process, its best estimate (smallest round trip): the same shift for all
        its events keeps its spans nested (a clock drifting during the run is not followed)."""
        self.offsets = {k: (p["clock_offset_ns"] or 0) if align else 0 for k, p in self.procs.items()}
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
        part.kept = None
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


KEEP_DECODED = 2_000_000   # events pass 1 keeps decoded for pass 2 (about 0.5 GB); beyond, pass 2 rereads


def _index(spill_dir: str, align: bool = True, damage: list | None = None, pieces: list | None = None,
           keep: int = KEEP_DECODED) -> _Index:
    """Pass 1 over the spill, or over `pieces` of it (rldbg.trace.spill.split; then unfinished:
    the caller merges the parts and finishes)."""
    idx = _Index(read_meta(spill_dir))
    kept: list | None = []
    for meta, evs in iter_records(spill_dir, damage, tuples=True, pieces=pieces):
        if kept is not None:
            kept.append((meta, evs))
            if idx.n + len(evs) > keep:
                kept = None
        idx.see(meta, evs)
    if pieces is None:
        idx.finish(align)
    idx.kept = kept
    return idx


def write_events(f, idx: _Index, spill_dir: str, pieces: list | None = None) -> int:
    """Pass 2: the events of the spill (or of `pieces` of it) as JSON lines, each ending ",\n";
    returns how many were written."""
    fmt, written = _Formatter(idx), 0
    if idx.kept is not None:
        # Each kept batch let go of right after it is written: freed while still in the cache,
        # not a million cold events at the end.
        kept, idx.kept = idx.kept, None
        kept.reverse()
        batches = map(kept.pop, repeat(-1, len(kept)))
    else:
        batches = iter_records(spill_dir, tuples=True, pieces=pieces)
    for meta, evs in batches:
        if not evs:
            continue
        parts = fmt.batch(evs, idx.offsets.get(_key(meta), 0))
        if parts:
            f.write((",\n".join(parts) + ",\n").encode("utf-8", "replace"))
            written += len(parts)
    return written


def _open(path: str):
    """The output, checked by _prepare_out before any work (export_spill)."""
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
            f.write((_dumps(obj) + ",\n").encode("utf-8", "replace"))
            written += 1

        f.write(b"[\n")
        for role, pid in idx.roles.items():
            put({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": role}})
            for rank in sorted(idx.ranks.get(role, ())):
                tname = "driver" if role == "driver" else f"rank {rank}"
                put({"ph": "M", "pid": pid, "tid": rank + 1, "name": "thread_name",
                     "args": dict(_where(idx, role, rank), name=tname)})
        put({"ph": "i", "s": "g", "pid": 1, "tid": 1, "name": "rldbg trace start", "ts": "0.000",
             "args": {"origin_unix_ns": idx.origin, "job_id": idx.meta.get("job_id"), "format": "rldbg-1",
                      "clock": dict(idx.clock(), aligned=align_clocks)}})
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
                 "ts": _us(rel), "args": {"process": key, "dropped": dropped}})
        # Last line carries no trailing comma; a writer that dies before it leaves a truncated
        # array, which Perfetto and rldbg report still read.
        f.write((_dumps({"ph": "C", "pid": 1, "name": "rldbg dropped events", "ts": "0.000",
                         "args": {"total": total}}) + "\n]\n").encode("utf-8"))
        written += 1
    return {"events": idx.n, "written": written, "path": out_path}


_SLICE_KEYS = frozenset(("role", "rank", "step", "method", "node", "ip"))
_INSTANT_KEYS = frozenset(("role", "rank", "step"))
_CACHE_MAX = 200_000   # distinct templates kept; beyond it the cache starts over


class _Formatter:
    """Chrome JSON text for a batch of events, by string templates: for each distinct
    (ph, cat, name, role, rank, step, method) the JSON of everything but the times and the
    event's own args is built once and cached; per event only the times, and args when it has
    any, are formatted. The output is byte for byte what json.dumps of the event's dict writes
    (same keys, same order); an event whose args carry a key the exporter also sets takes the
    dict path, so its args win as before."""

    def __init__(self, idx: _Index):
        self.idx = idx
        # Where each rank's process runs, shown on its call slices.
        self.nodes = {rr: (p.get("node_id", "")[:8], p.get("node_ip", "")) for rr, p in
                      ((rr, idx.procs.get(k, {})) for rr, k in idx.rank_proc.items())}
        self.cache: dict = {}   # key -> (prefix up to the ts digits, args JSON, args without braces, defaults)

    def _template(self, key) -> tuple:
        ph, cat, name, role, rank, stp, method = key
        pid, tid = self.idx.roles[role], rank + 1
        if ph == SLICE:
            a = {"role": role, "rank": rank}
            if stp is not None:
                a["step"] = stp
            if method is not None:
                a["method"] = method
            if cat == "call" and (role, rank) in self.nodes:
                a["node"], a["ip"] = self.nodes[(role, rank)]
            pre = f'{{"ph":"X","pid":{pid},"tid":{tid},"cat":{_dumps(cat)},"name":{_dumps(name)},"ts":"'
        elif ph == INSTANT:
            a = {"role": role, "rank": rank, "step": stp}
            pre = f'{{"ph":"i","s":"t","pid":{pid},"tid":{tid},"cat":{_dumps(cat)},"name":{_dumps(name)},"ts":"'
        else:   # COUNTER
            a = {}
            pre = f'{{"ph":"C","pid":{pid},"name":{_dumps(f"rank {rank} {name}")},"ts":"'
        full = _dumps(a)
        if len(self.cache) > _CACHE_MAX:
            self.cache.clear()
        t = self.cache[key] = (pre, full, full[1:-1], a)
        return t

    def batch(self, evs, off: int) -> list:
        """The JSON texts of a batch's events (a driver call expands into several), in order."""
        base = off - self.idx.origin
        cache, template, ajson, bind_id = self.cache, self._template, _args_json, self.idx.bind_id
        out, r3 = [], _R3
        app = out.append
        for ev in evs:
            ph, cat, name, ts, dur, role, rank, stp, method, flow, args = ev
            if ph == "D":
                self._driver_call(ev, off, app)
                continue
            key = (ph, cat, name, role, rank, stp, method)
            t = cache.get(key)
            if t is None:
                if ph not in _TEMPLATED:
                    continue   # an unknown phase: not written, as before
                t = template(key)
            q, r = divmod(ts + base, 1000)
            r = r3[r]
            if ph == "X":
                if not args:
                    aj = t[1]
                elif type(args) is dict and _SLICE_KEYS.isdisjoint(args):
                    aj = ajson(args)[:-1] + "," + t[2] + "}"
                else:
                    a = dict(args)
                    for k, v in t[3].items():
                        a.setdefault(k, v)
                    aj = _dumps(a)
                dq, dr = divmod(dur, 1000)
                dr = r3[dr]
                fid = bind_id(flow, role, rank) if flow is not None and cat == "call" else None
                if fid is not None:
                    app(f'{t[0]}{q}.{r}","dur":"{dq}.{dr}","args":{aj},'
                        f'"bind_id":{fid},"flow_in":true,"flow_out":true}}')
                else:
                    app(f'{t[0]}{q}.{r}","dur":"{dq}.{dr}","args":{aj}}}')
            elif ph == "C":
                app(f'{t[0]}{q}.{r}","args":{ajson(args)}}}')
            else:
                if not args:
                    aj = t[1]
                elif type(args) is dict and _INSTANT_KEYS.isdisjoint(args):
                    aj = ajson(args)[:-1] + "," + t[2] + "}"
                else:
                    aj = _dumps(dict(args, role=role, rank=rank, step=stp))
                app(f'{t[0]}{q}.{r}","args":{aj}}}')
        return out

    def _driver_call(self, raw, off: int, app) -> None:
        ev = decode(raw)
        if off:
            ev = ev._replace(ts_ns=ev.ts_ns + off)
            if ev.args and ev.args.get("t_dispatched"):
                ev = ev._replace(args=dict(ev.args, t_dispatched=int(ev.args["t_dispatched"]) + off))
        _driver_call(lambda obj: app(_dumps(obj)), ev, self.idx)


_TEMPLATED = frozenset((SLICE, INSTANT, "C"))
_R3 = [f"{i:03d}" for i in range(1000)]   # the ns digits of a µs time


def _where(idx: _Index, role: str, rank: int) -> dict:
    """The process behind role/rank's track: pid, host, node, clock ({} when no event named it)."""
    p = idx.procs.get(idx.rank_proc.get((role, rank)), {})
    return {k: p[k] for k in ("pid", "host", "node_id", "node_ip", "clock_offset_ns", "clock_uncertainty_ns")
            if k in p}


def _driver_call(put, ev, idx: _Index) -> None:
    ts, dur, stp, method, flow, args = ev.ts_ns, ev.dur_ns, ev.step, ev.method, ev.flow, ev.args
    o = idx.origin
    end, world = ts + dur, int(args.get("world") or 0)
    t_disp = min(max(int(args.get("t_dispatched") or end), ts), end)
    group = args.get("group")
    ends = idx.rank_ends.get(flow, {})
    served = sorted({r for (ro, r) in ends}) if ends else []
    base = {"role": "driver", "group": group, "method": method, "step": stp, "flow": flow}
    put({"ph": "X", "pid": 1, "tid": 1, "cat": "driver_call", "name": method, "ts": _us(ts - o),
         "dur": _us(dur), "args": dict(base, mode=args.get("mode"), world=world, status=args.get("status"),
                                        error=args.get("error"), result=args.get("result"))})
    put({"ph": "X", "pid": 1, "tid": 1, "cat": "driver_call", "name": "dispatch", "ts": _us(ts - o),
         "dur": _us(t_disp - ts), "args": base})
    shards = args.get("shards") or []
    n = max(world, len(served), 1)
    step_ns = (t_disp - ts) // n
    roles_of = {r: ro for (ro, r) in ends}
    for i in range(n):
        e = {"ph": "X", "pid": 1, "tid": 1, "cat": "driver_call", "name": f"send → rank {i}",
             "ts": _us(ts + i * step_ns - o), "dur": _us(step_ns),
             "args": dict(base, rank=i, shard=shards[i] if i < len(shards) else None)}
        fid = idx.bind_id(flow, roles_of[i], i) if i in roles_of else None
        if fid is not None:
            e.update(bind_id=fid, flow_out=True)
        put(e)
    put({"ph": "X", "pid": 1, "tid": 1, "cat": "driver_call", "name": "wait", "ts": _us(t_disp - o),
         "dur": _us(end - t_disp), "args": base})
    for (ro, r), t in sorted(ends.items(), key=lambda kv: kv[1]):
        at = min(max(t, t_disp), end)
        e = {"ph": "X", "pid": 1, "tid": 1, "cat": "driver_call", "name": f"recv ← rank {r}",
             "ts": _us(at - o), "dur": "0.000", "args": dict(base, rank=r, role_served=ro)}
        fid = idx.bind_id(flow, ro, r)
        if fid is not None:
            e.update(bind_id=fid, flow_in=True)
        put(e)


if __name__ == "__main__":
    # A helper of a side-by-side export. It works with the module as imported by name, not with
    # this __main__ copy, so that what it pickles back names rldbg.trace.export's classes.
    code = export_jobs.helper(importlib.import_module("rldbg.trace.export"))
    # Out at once: its answers are flushed and its part file closed, and freeing its half of the
    # spill object by object at exit took up to 0.4 s that the exporting process waited for.
    sys.stderr.flush()
    os._exit(code)
