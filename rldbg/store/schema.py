"""The store's tables, and opening one.

kinds      one row per distinct (proc, ph, cat, name, role, rank, method) among the events: what
           a process records again and again (a call of one method on one rank, one memory
           counter) is written once. proc is the process that sent them. name, role, rank and
           method are stored as they came (no column type, so no conversion): a value of a type
           rldbg never writes is still seen as such by the report, which skips and counts it. One
           exception: the driver-role kinds of a controller beside the first carry its track as
           their rank (rldbg.store.ingest), as the export lays them out.
events     one row per event, in arrival order (`seq`): its kind, ts, dur, step, flow and args. ts
           is as its process recorded it; the process's `shift` puts it on the trace's clock, in
           ns from the trace's origin. args is the JSON text of the event's args
           (rldbg.trace.chrome_text.args_json: the bytes the Perfetto export writes), NULL for none.
report_rows the events the report reads (rldbg.store.queries): rldbg's slices and the few instants
           an analysis looks at, as in events, in arrival order; a slice with a field of a type
           rldbg never writes is left out and counted in run's "odd_fields" (rldbg.store.ingest).
           Two in ten of a run's events, read without a scan of the rest nor a check.
event_rows the view of the two joined: one row per event with all 11 fields (for a person at the
           sqlite3 shell; the readers query the tables).
processes  one row per process that sent events ("host:pid"): where it ran, its best clock
           estimate, the events it dropped before shipping, its first timestamp, and `shift`
           (its clock offset less the trace's origin, ns).
tracks     one row per role/rank track, in the order first seen (the export's pids and tids),
           with the process that stood behind it last.
series     one row per counter series (a rank's memory or ledger series, a GPU's), its times and
           values as JSON arrays: the samples taken apart and sorted once, when the store is
           written (rldbg.store.series), as every report reads them so.
run        key -> JSON value: "meta" (the spill's meta.json: origin, job, what was recorded),
           "origin_ns", "aligned", "source" (spill or the imported file), "notes" (damage an
           import met), "odd_fields", "odd_samples" and "dropped_total".

Readers pick the kinds they need (a few rows; the report by rldbg.store.queries.reads(), the rule
its rows were kept by) and read those kinds' events in one pass over the events table (the
export) or report_rows (the report), in arrival order, without an index to build at ingest.
"""
from __future__ import annotations

import json
import os
import sqlite3

import orjson

VERSION = 4

_TABLES = """
CREATE TABLE kinds (id INTEGER PRIMARY KEY, proc INTEGER, ph TEXT, cat, name, role, rank, method);
CREATE TABLE events (seq INTEGER PRIMARY KEY, kind INTEGER, ts INTEGER, dur INTEGER, step, flow, args TEXT);
CREATE TABLE report_rows (kind INTEGER, ts INTEGER, dur INTEGER, step, flow, args TEXT);
CREATE VIEW event_rows AS SELECT e.seq, k.proc, k.ph, k.cat, k.name, e.ts, e.dur, k.role, k.rank, e.step,
                                 k.method, e.flow, e.args FROM events e JOIN kinds k ON k.id = e.kind;
CREATE TABLE processes (id INTEGER PRIMARY KEY, key TEXT, pid, host, node_id TEXT, node_ip TEXT,
                        clock_offset_ns INTEGER, clock_uncertainty_ns INTEGER, dropped INTEGER DEFAULT 0,
                        t_sent INTEGER DEFAULT 0, first_ts INTEGER, shift INTEGER DEFAULT 0);
CREATE TABLE tracks (ord INTEGER PRIMARY KEY, role, rank, proc INTEGER);
CREATE TABLE series (target TEXT, a, b, name, times TEXT, vals TEXT, exact INTEGER);
CREATE TABLE run (key TEXT PRIMARY KEY, value TEXT);
"""


class StoreError(ValueError):
    """One line naming the store file and what is wrong with it."""


def create(path: str) -> sqlite3.Connection:
    """A new, empty store at `path` (":memory:" for one that lives in this process only); a file
    already there is replaced. Written without a journal: a store is written once, by one
    process, and one cut short is refused on opening (it has no "complete" mark)."""
    if path != ":memory:":
        for p in (path, path + "-journal"):
            if os.path.lexists(p):
                os.remove(p)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.executescript(_TABLES)
    put(conn, "version", VERSION)
    conn.execute("BEGIN")
    return conn


def finish(conn: sqlite3.Connection) -> None:
    """The rows written committed and the store marked complete (the writers put the counter
    series in first: rldbg.store.series.write)."""
    put(conn, "complete", True)
    conn.execute("COMMIT")


def open_store(path: str) -> sqlite3.Connection:
    """An existing, complete store, read-only; StoreError naming it otherwise."""
    if not os.path.isfile(path):
        raise StoreError(f"store not found: {path!r}")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        complete, version = get(conn, "complete"), get(conn, "version")
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path!r} is not an rldbg store ({e})") from None
    if version != VERSION or not complete:
        conn.close()
        why = "written only in part (the run stopped while writing it)" if not complete else f"version {version}"
        raise StoreError(f"{path!r} is an rldbg store {why}; this rldbg reads complete stores of version {VERSION}")
    return conn


def put(conn: sqlite3.Connection, key: str, value) -> None:
    conn.execute("INSERT OR REPLACE INTO run VALUES (?, ?)", (key, json.dumps(value, default=str)))


def get(conn: sqlite3.Connection, key: str, default=None):
    row = conn.execute("SELECT value FROM run WHERE key = ?", (key,)).fetchone()
    return default if row is None else json.loads(row[0])


def raw_args(text):
    """An event's args as the producer gave them (None for none), from the store's JSON text."""
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:   # NaN, Infinity: the stdlib wrote them, the stdlib reads them
        return json.loads(text)
