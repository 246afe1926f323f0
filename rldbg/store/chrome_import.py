"""A Chrome JSON trace from elsewhere (a run copied off a cluster, a flight-recorder dump, an
edited or damaged file) into a store, so that the report reads it as it reads a run's own.

The file is read by the tolerant reader (rldbg.trace.load: truncation, gzip damage, garbled
regions, malformed events, each kind of damage one note) and laid back into rldbg's columns by
rldbg's export layout (rldbg.trace.chrome_text): a role is its process's name (process_name
metadata) unless the slice's args name one, a rank its args' "rank" or its thread (tid = rank +
1), counters on "rank N memory" / "rank N ledger" / "rank N gpuK memory" tracks are the memory,
ledger and GPU samples, the "rldbg trace start" record's args are the store's start. What the
report reads is imported: rldbg's slices, those instants, those counters and the tracks'
processes; a slice or sample of a type rldbg never writes is left out here and counted in the
store's notes, as the report would count it.
"""
from __future__ import annotations

import re
import sqlite3

from rldbg.store import schema
from rldbg.store.ingest import EventWriter
from rldbg.store.queries import KEPT_INSTANTS
from rldbg.trace.chrome_text import args_json
from rldbg.trace.load import _load, no_gc, ts_ns
from rldbg.trace.report_trace import bad_field, finite_number

_KEPT_SLICES = ("call", "transition", "step", "driver_call")
_RANK_COUNTER = re.compile(r"^rank (\d+) (memory|ledger|gpu\d+ memory)$")
_DROPPED = "rldbg dropped events"   # the exporter's counter of events dropped before shipping
TRACE_START = "rldbg trace start"


def process_names(meta: list) -> dict:
    """pid -> role, from the process_name metadata (a name that is not a string names nothing,
    nor does a pid that cannot be a key: a list)."""
    return {e["pid"]: e["args"]["name"] for e in meta
            if e.get("ph") == "M" and e.get("name") == "process_name" and e.get("args") and "pid" in e
            and type(e["args"].get("name")) is str and type(e["pid"]).__hash__ is not None}


def _role_of_pid(names: dict, pid):
    try:
        return names.get(pid)
    except TypeError:   # an unhashable pid (a list): no process_name can name it
        return None


def _ns(v) -> int:
    """A Chrome µs time as ns; rldbg's own "123.456" is read as its digits (exact)."""
    if type(v) is str and v[-4:-3] == ".":
        try:
            return int(v.replace(".", "", 1))
        except ValueError:   # "1.5e3": a float's text with its point in that place
            pass
    return ts_ns(v)


def _plain(v):
    return v if type(v) in (str, int, float, type(None)) and type(v) is not bool else args_json(v)


def from_chrome(path: str, db_path: str = ":memory:") -> sqlite3.Connection:
    """The store of the Chrome JSON trace at `path` (TraceFileError, one line, for what is not
    one); in memory unless `db_path` names a file."""
    with no_gc():
        _, notes, by_ph = _load(path)
        conn = schema.create(db_path)
        conn.execute("INSERT INTO processes (id, key) VALUES (1, ?)", (f"imported:{path}",))
        meta = by_ph.get("M", [])
        names = process_names(meta)
        _tracks(conn, meta, names)
        odd: dict = {}
        rows = _slices(by_ph.get("X", ()), names, odd)
        rows += _instants(conn, [e for ph in ("i", "I") for e in by_ph.get(ph, ())], names)
        samples, odd_samples, dropped = _counters(by_ph.get("C", ()), names)
        rows += samples
        out = EventWriter(conn)
        out.add(1, rows, args_are_text=True)
        out.close()
    schema.put(conn, "source", {"imported": path})
    schema.put(conn, "notes", notes)
    schema.put(conn, "odd_fields", odd)
    schema.put(conn, "odd_samples", odd_samples)
    schema.put(conn, "dropped_total", dropped)
    schema.finish(conn)
    return conn


def _tracks(conn, meta: list, names: dict) -> None:
    """Each rank's track and the process behind it, from the thread_name metadata."""
    for e in meta:
        a = e.get("args") or {}
        if e.get("name") != "thread_name":
            continue
        role, tid = _role_of_pid(names, e.get("pid")), e.get("tid", 1)
        if role is None or not (role == "driver" or type(tid) is int):
            continue
        cur = conn.execute("INSERT INTO processes (key, pid, host, node_id, node_ip, clock_offset_ns, "
                           "clock_uncertainty_ns) VALUES (?,?,?,?,?,?,?)",
                           (f"{role}/{tid}", _plain(a.get("pid")), _plain(a.get("host")),
                            str(a.get("node_id") or "") if "node_id" in a else None, str(a.get("node_ip") or ""),
                            _plain(a.get("clock_offset_ns")), _plain(a.get("clock_uncertainty_ns"))))
        # the driver's process: one track per controller (tid = its track + 1; rldbg.store.tracks)
        conn.execute("INSERT INTO tracks (role, rank, proc) VALUES (?,?,?)",
                     (role, tid - 1 if type(tid) is int else 0, cur.lastrowid))


def _slices(events, names: dict, odd: dict) -> list:
    rows = []
    for e in events:
        cat = e.get("cat")
        if type(cat) is not str or cat not in _KEPT_SLICES:
            continue   # user spans and the like: not part of the analysis
        a = e.get("args") or {}
        if cat == "driver_call" and "mode" not in a:
            continue   # the dispatch/send/wait/recv parts of a driver call
        pid = e.get("pid")
        if "role" in a:
            role = a["role"] if type(a["role"]) is str else f"pid {pid}" if a["role"] is None else str(a["role"])
        else:
            role = _role_of_pid(names, pid)
            role = role if role is not None else f"pid {pid}"
        rec = {"name": e.get("name"), "rank": a.get("rank", 0), "step": a.get("step"), "method": a.get("method"),
               "flow": a.get("flow"), "args": a}
        why = bad_field(rec)
        if why is not None:
            odd[why] = odd.get(why, 0) + 1
            continue
        rows.append(("X", cat, rec["name"], _ns(e["ts"]), _ns(e.get("dur", 0)), role, rec["rank"], rec["step"],
                     rec["method"], rec["flow"], args_json(a) if a else None))
    return rows


def _instants(conn, events: list, names: dict) -> list:
    rows = []
    for e in events:
        name = e.get("name")
        if type(name) is not str:
            continue
        a = e.get("args") or {}
        if name == TRACE_START:
            if schema.get(conn, "start") is None:
                schema.put(conn, "start", a)
            continue
        if name not in KEPT_INSTANTS:
            continue
        role = _role_of_pid(names, e.get("pid")) or "driver"
        tid = e.get("tid")
        rank = tid - 1 if type(tid) is int else 0   # the driver's tid: its controller's track + 1
        role, rank, step = _plain(a.get("role", role)), _plain(a.get("rank", rank)), _plain(a.get("step"))
        rows.append(("i", "rldbg", name, _ns(e["ts"]), 0, role, rank, step, None, None, args_json(a) if a else None))
    return rows


def _counters(events, names: dict) -> tuple[list, int, int]:
    """(rows of the memory, ledger and GPU samples, samples that were not numbers, drop total)."""
    rows, odd, dropped = [], 0, []
    for e in events:
        args = e.get("args")
        if not args:
            continue
        name = e.get("name", "")
        name = name if type(name) is str else str(name)
        m = _RANK_COUNTER.match(name)
        if m is None and name != _DROPPED:
            continue
        good = {k: v for k, v in args.items() if finite_number(v)}
        odd += len(args) - len(good)
        if m is None:
            if "total" in good:
                dropped.append((_ns(e["ts"]), good["total"]))
            continue
        if not good:
            continue
        kind = m.group(2)
        cat = kind if kind in ("memory", "ledger") else "gpu"
        rows.append(("C", cat, kind, _ns(e["ts"]), 0, _role_of_pid(names, e.get("pid")), int(m.group(1)), None,
                     None, None, args_json(good)))
    return rows, odd, (sorted(dropped)[-1][1] or 0) if dropped else 0
