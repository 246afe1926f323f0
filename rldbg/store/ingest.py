"""A run's spill (rldbg.trace.spill) into its store (rldbg.store.schema), once, when the trace
stops: off the recording path, which only ever appends msgpack to the spill.

What the export needs besides the events (rldbg.store.tracks.Tracks: tracks in first-seen order,
each process's best clock estimate, drops, the trace's origin, the controllers) is learnt on the
same read and kept in the store's processes and tracks tables, so that the export and the report
never read the spill again. A controller beside the first (an evaluation actor beside VeRL's
TaskRunner) has its driver-role events on its own track: their rank is that track in the store,
as in the export and in an export imported back, so that each controller's calls, steps and idle
time are told apart by every reader alike. The spill's damage tolerance is the spill reader's: `damage` receives what it
skipped.
"""
from __future__ import annotations

import json
import sqlite3

from rldbg.store import schema
from rldbg.trace.chrome_text import args_json
from rldbg.store.tracks import Tracks, process_key
from rldbg.trace.load import no_gc
from rldbg.trace.spill import iter_records, read_meta

_INSERT = "INSERT INTO events (proc, ph, cat, name, ts, dur, role, rank, step, method, flow, args) " \
          "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
_BATCH = 50_000
_BINDABLE = (str, int, float, type(None))


def _bindable(row: tuple) -> tuple:
    """A row SQLite takes: a field it cannot hold (a list, a map, an int beyond 64 bits, from a
    producer of its own) as its JSON text, which is what the export writes for it."""
    return tuple(v if type(v) in _BINDABLE and not (type(v) is int and not -(1 << 63) <= v < 1 << 63)
                 else args_json(v) for v in row)


def _insert(conn: sqlite3.Connection, rows: list) -> None:
    try:
        conn.executemany(_INSERT, rows)
    except (sqlite3.InterfaceError, sqlite3.ProgrammingError, OverflowError, TypeError):
        conn.executemany(_INSERT, map(_bindable, rows))


def from_spill(spill_dir: str, db_path: str, damage: list | None = None,
               exported_to: str | None = None) -> sqlite3.Connection:
    """The store of the spill at `spill_dir`, written to `db_path` (":memory:" for one kept in this
    process); returns it open. `exported_to`: the name of the Perfetto file exported from it
    beside it (`rldbg report` on that file reads this store). FileNotFoundError / SpillError
    (one line) for what is not a spill."""
    meta = read_meta(spill_dir)
    conn = schema.create(db_path)
    idx = Tracks(meta)
    procs: dict = {}
    rows: list = []
    with no_gc():
        for bmeta, evs in iter_records(spill_dir, damage, tuples=True):
            idx.see(bmeta, evs)
            key = process_key(bmeta)
            proc = procs.get(key)
            if proc is None:
                proc = procs[key] = len(procs) + 1
            if evs:
                rows += [(proc, ph, cat, name, ts, dur, role, rank, step, method, flow,
                          args_json(args) if args else None)
                         for ph, cat, name, ts, dur, role, rank, step, method, flow, args in evs]
                if len(rows) >= _BATCH:
                    _insert(conn, rows)
                    rows = []
        if rows:
            _insert(conn, rows)
    idx.finish(align=True)
    _controller_tracks(conn, idx, procs)
    _write_index(conn, idx, procs, meta, spill_dir)
    schema.put(conn, "exported_to", exported_to)
    schema.finish(conn)
    return conn


def _controller_tracks(conn, idx: Tracks, procs: dict) -> None:
    """Each controller beside the first: its driver-role events on its track (rank = track). Set
    once the spill is read, not as it goes in: a process is known to be a controller from its first
    driver call or step, and its driver-role events before that move too. A run with one
    controller (nearly every run) changes nothing here."""
    for key, track in idx.controllers.items():
        if track:
            conn.execute("UPDATE events SET rank = ? WHERE proc = ? AND role = 'driver'", (track, procs[key]))


def _write_index(conn, idx: Tracks, procs: dict, meta: dict, source: str) -> None:
    drops = idx.drops
    for key, pid in procs.items():
        p = idx.procs.get(key, {})
        dropped, t_sent = drops.get(key, (0, 0))
        off = idx.offsets.get(key, 0)
        conn.execute("INSERT INTO processes VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     (pid, key, _plain(p.get("pid")), _plain(p.get("host")), p.get("node_id"), p.get("node_ip"),
                      p.get("clock_offset_ns"), p.get("clock_uncertainty_ns"), dropped, t_sent,
                      idx.first.get(key), off - idx.origin))
    order = [(role, rank) for role in idx.roles for rank in sorted(idx.ranks.get(role, ()))]
    conn.executemany("INSERT INTO tracks (role, rank, proc) VALUES (?,?,?)",
                     [(role, rank, procs.get(idx.rank_proc.get((role, rank)))) for role, rank in order])
    schema.put(conn, "meta", meta)
    schema.put(conn, "origin_ns", idx.origin)
    schema.put(conn, "source", {"spill": source})
    schema.put(conn, "notes", [])
    schema.put(conn, "dropped_total", sum(d for d, _ in drops.values()))
    schema.put(conn, "start", idx.start_args(aligned=True))


def _plain(v):
    return v if type(v) in _BINDABLE else json.dumps(v, default=str)
