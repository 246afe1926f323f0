"""The store's tables, and opening one.

events     one row per event, the 11 fields of rldbg.trace.events plus `seq` (arrival order) and
           `proc` (the process that sent it). ts is as the process recorded it; its process's
           `shift` puts it on the trace's clock, in ns from the trace's origin. args is the JSON
           text of the event's args (rldbg.trace.chrome_text.args_json: the bytes the Perfetto
           export writes), NULL for none. name, role, rank, step, method and flow are stored as
           they came (no column type, so no conversion): a value of a type rldbg never writes is
           still seen as such by the report, which skips and counts it. One exception: the
           driver-role events of a controller beside the first carry its track as their rank
           (rldbg.store.ingest), as the export lays them out.
processes  one row per process that sent events ("host:pid"): where it ran, its best clock
           estimate, the events it dropped before shipping, its first timestamp, and `shift`
           (its clock offset less the trace's origin, ns).
tracks     one row per role/rank track, in the order first seen (the export's pids and tids),
           with the process that stood behind it last.
run        key -> JSON value: "meta" (the spill's meta.json: origin, job, what was recorded),
           "origin_ns", "aligned", "source" (spill or the imported file), "notes" (damage an
           import met), "odd_fields" and "dropped_total".

An index on events(cat), and one on the instants' names, let the report read its few categories
and instants of a million events.
"""
from __future__ import annotations

import json
import os
import sqlite3

import orjson

VERSION = 1

_TABLES = """
CREATE TABLE events (seq INTEGER PRIMARY KEY, proc INTEGER, ph TEXT, cat, name, ts INTEGER, dur INTEGER,
                     role, rank, step, method, flow, args TEXT);
CREATE TABLE processes (id INTEGER PRIMARY KEY, key TEXT, pid, host, node_id TEXT, node_ip TEXT,
                        clock_offset_ns INTEGER, clock_uncertainty_ns INTEGER, dropped INTEGER DEFAULT 0,
                        t_sent INTEGER DEFAULT 0, first_ts INTEGER, shift INTEGER DEFAULT 0);
CREATE TABLE tracks (ord INTEGER PRIMARY KEY, role, rank, proc INTEGER);
CREATE TABLE run (key TEXT PRIMARY KEY, value TEXT);
"""
INDEXES = ("CREATE INDEX IF NOT EXISTS events_cat ON events(cat)",
           "CREATE INDEX IF NOT EXISTS events_instants ON events(name) WHERE ph IN ('i', 'I')")


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
    """The rows written committed, the indexes built and the store marked complete."""
    for index in INDEXES:
        conn.execute(index)
    put(conn, "complete", True)
    conn.execute("COMMIT")


def open_store(path: str) -> sqlite3.Connection:
    """An existing, complete store, read-only; StoreError naming it otherwise."""
    if not os.path.isfile(path):
        raise StoreError(f"store not found: {path!r}")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        complete = get(conn, "complete")
        version = get(conn, "version")
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
