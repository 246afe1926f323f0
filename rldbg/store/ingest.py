"""A run's spill (rldbg.trace.spill) into its store (rldbg.store.schema), once, when the trace
stops: off the recording path, which only ever appends msgpack to the spill.

What the export needs besides the events (rldbg.store.tracks.Tracks: tracks in first-seen order, each process's best
clock estimate, drops, the trace's origin, the controllers) is learnt on the same read and kept in the store's processes
and tracks tables, so that the export and the report never read the spill again. A controller beside the first (an
evaluation actor beside VeRL's TaskRunner) has its driver-role events on its own track: their rank is that track in the
store, as in the export and in an export imported back, so that each controller's calls, steps and idle time are told
apart by every reader alike. The spill's damage tolerance is the spill reader's: `damage` receives what it skipped.
"""
from __future__ import annotations

import sqlite3
from operator import itemgetter

from rldbg.store import no_gc, queries, schema, series
from rldbg.store.tracks import Tracks, process_key
from rldbg.trace.chrome_text import args_json
from rldbg.trace.report_trace import bad_field
from rldbg.trace.spill import iter_records, read_meta

_BATCH = 50_000
_BINDABLE = (str, int, float, type(None))
_KIND = itemgetter(0, 1, 2, 5, 6, 8)           # ph, cat, name, role, rank, method
# The fields of a kind and the types that tell their values apart as dict keys do.
_PLAIN = [(itemgetter(i), {str, type(None)}) for i in (1, 2, 5, 8)] + [(itemgetter(6), {int})]


def _bindable(row: tuple) -> tuple:
    """A row SQLite takes: a field it cannot hold (a list, a map, an int beyond 64 bits, from a
    producer of its own) as its JSON text, which is what the export writes for it."""
    return tuple(v if type(v) in _BINDABLE and not (type(v) is int and not -(1 << 63) <= v < 1 << 63)
                 else args_json(v) for v in row)


def _insert(conn: sqlite3.Connection, table: str, columns: str, rows: list, before: int) -> None:
    """The rows into `table`, whose rowids so far end at `before`; where SQLite refuses a field
    (a list, a map, an int beyond 64 bits, from a producer of its own), the rows it took before
    that one are taken out again and all go in with _bindable."""
    sql = f"INSERT INTO {table} ({columns}) VALUES ({','.join('?' * (columns.count(',') + 1))})"
    try:
        conn.executemany(sql, rows)
    except (sqlite3.InterfaceError, sqlite3.ProgrammingError, OverflowError, TypeError):
        conn.execute(f"DELETE FROM {table} WHERE rowid > ?", (before,))
        conn.executemany(sql, map(_bindable, rows))


def _kind_key(evs) -> itemgetter:
    """How a batch's events are told apart into kinds: by their fields, and by those fields' types
    too where one is not a string (1, 1.0 and True are one dict key; a map is none)."""
    if all(set(map(type, map(field, evs))) <= types for field, types in _PLAIN):
        return _KIND
    return lambda ev: tuple(args_json(v) if type(v) not in _BINDABLE else (type(v), v) for v in _KIND(ev))


class EventWriter:
    """Events into the store's kinds and events tables, a batch at a time (rldbg.store.schema), the
    counter samples kept as series into .samples as they pass (rldbg.store.series), and the events
    the report reads into report_rows, less the slices with a field of a type rldbg never writes,
    counted by field in .odd (rldbg.trace.report_trace.bad_field)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn, self.rows, self.kinds, self.written = conn, [], [], 0
        self.ids: dict = {}   # proc -> {kind key: kind id}
        self.samples, self.series_kinds = series.Samples(), set()
        self.report, self.reported, self.report_written, self.odd = [], {}, 0, {}   # reported: kind id -> its fields

    def add(self, proc: int, evs, args_are_text: bool = False) -> None:
        """A process's events (11-field tuples, rldbg.trace.events); their args as JSON text already with args_are_text
        (rldbg.store.chrome_import, which checks its slices itself), else as the producer gave them."""
        if not evs:
            return
        ids = self.ids.setdefault(proc, {})
        kind_of = _kind_key(evs)
        for k, ev in dict(zip(map(kind_of, evs), evs)).items():   # the batch's kinds, at C speed
            if k not in ids:
                ids[k] = len(self.kinds) + 1
                self.kinds.append((ids[k], proc, *_KIND(ev)))
                if ev[0] == "C" and type(ev[1]) is str and ev[1] in series.CATS:
                    self.series_kinds.add(ids[k])
                elif queries.reads(*ev[:3]):
                    self.reported[ids[k]] = _KIND(ev)
        first = len(self.rows)
        if kind_of is not _KIND or args_are_text:
            self.rows += [(ids[kind_of(ev)], ev[3], ev[4], ev[7], ev[9],
                           ev[10] if args_are_text else args_json(ev[10]) if ev[10] else None) for ev in evs]
        else:
            self.rows += [(ids[(ph, cat, name, role, rank, method)], ts, dur, step, flow,
                           args_json(args) if args else None)
                          for ph, cat, name, ts, dur, role, rank, step, method, flow, args in evs]
        if self.series_kinds:
            kept = self.series_kinds
            if got := [(r[0], r[1], ev[10]) for r, ev in zip(self.rows[first:], evs) if r[0] in kept]:
                self.samples.add(*zip(*got), args_are_text)
        if self.reported:
            self._report(self.rows[first:], evs, args_are_text)
        if len(self.rows) >= _BATCH:
            self._flush()

    def _report(self, rows: list, evs, checked: bool) -> None:
        """The batch's rows the report reads into .report; the spill's slices checked here by the
        rule in rldbg.trace.report_trace, so that the report reads them without a check."""
        for row, ev in zip(rows, evs):
            kind = self.reported.get(row[0])
            if kind is None:
                continue
            ph, cat, name, _, rank, method = kind
            a = ev[10]
            if not checked and ph not in ("i", "I"):
                a = {} if a is None else a if type(a) is dict else {"value": a}   # as the report reads it
                if cat == "driver_call" and "mode" not in a:
                    continue   # a driver call's dispatch/send/wait/recv parts
                why = bad_field({"name": method if ph == "D" else name, "rank": rank, "step": ev[7],
                                 "method": method, "flow": ev[9], "args": a})
                if why is not None:
                    self.odd[why] = self.odd.get(why, 0) + 1
                    continue
            self.report.append(row)

    def _flush(self) -> None:
        if self.rows:
            _insert(self.conn, "events", "kind, ts, dur, step, flow, args", self.rows, self.written)
            self.written += len(self.rows)
            self.rows = []
        if self.report:
            _insert(self.conn, "report_rows", "kind, ts, dur, step, flow, args", self.report, self.report_written)
            self.report_written += len(self.report)
            self.report = []

    def close(self) -> None:
        self._flush()
        if self.kinds:
            _insert(self.conn, "kinds", "id, proc, ph, cat, name, role, rank, method", self.kinds, 0)
            self.kinds = []


def from_spill(spill_dir: str, db_path: str, damage: list | None = None,
               exported_to: str | None = None) -> sqlite3.Connection:
    """The store of the spill at `spill_dir`, written to `db_path` (":memory:" for one kept in this process); returns it
    open. `exported_to`: the name of the Perfetto file exported from it beside it (`rldbg report` on that file reads
    this store). FileNotFoundError / SpillError (one line) for what is not a spill."""
    meta = read_meta(spill_dir)
    conn = schema.create(db_path)
    idx = Tracks(meta)
    procs: dict = {}   # "host:pid" -> its id
    out = EventWriter(conn)
    with no_gc():
        for bmeta, evs in iter_records(spill_dir, damage, tuples=True):
            idx.see(bmeta, evs)
            out.add(procs.setdefault(process_key(bmeta), len(procs) + 1), evs)
        out.close()
    idx.finish(align=True)
    _controller_tracks(conn, idx, procs)
    _write_index(conn, idx, procs, meta, spill_dir)
    schema.put(conn, "exported_to", exported_to)
    schema.put(conn, "odd_fields", out.odd)
    series.write(conn, out.samples)
    schema.finish(conn)
    return conn


def _controller_tracks(conn, idx: Tracks, procs: dict) -> None:
    """Each controller beside the first: its driver-role events on its track (rank = track). Set once the spill is read,
    not as it goes in: a process is known to be a controller from its first driver call or step, and its driver-role
    events before that move too. A run with one controller (nearly every run) changes nothing here."""
    for key, track in idx.controllers.items():
        if track:
            conn.execute("UPDATE kinds SET rank = ? WHERE proc = ? AND role = 'driver'", (track, procs[key]))


def _write_index(conn, idx: Tracks, procs: dict, meta: dict, source: str) -> None:
    drops = idx.drops
    for key, pid in procs.items():
        p = idx.procs.get(key, {})
        dropped, t_sent = drops.get(key, (0, 0))
        off = idx.offsets.get(key, 0)
        conn.execute("INSERT INTO processes VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     (pid, key, *_bindable((p.get("pid"), p.get("host"))), p.get("node_id"), p.get("node_ip"),
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
