"""A run's store (rldbg.store) → the Chrome JSON trace Perfetto loads without import errors.

export_spill() writes a spill's store beside the trace (rldbg.store.ingest) and exports from it;
export_store() exports a store: the tracks, time origin, clock offsets and the rank slices that end
each driver call come from the store's tables (Tracks.from_store), then the events in arrival order,
a chunk at a time: counters' text written by SQLite, the others' by rldbg.trace.chrome_text (the layout).

Controllers: each process that makes driver calls or marks steps has a track of its own on the
driver's process, in the order first seen: "driver", then "controller pid N".

Nodes and clocks: each rank's thread_name metadata names the process behind it (pid, host, node, clock offset and
uncertainty). A process's timestamps are shifted by its best clock offset estimate (rldbg.trace.clock), so all times are
the collector's clock; the "rldbg trace start" instant's args hold the per-process estimates.
"""
from __future__ import annotations

import os
import sqlite3
import stat
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, nullcontext, suppress
from itertools import chain
from pathlib import Path

from rldbg.store import no_gc
from rldbg.store.tracks import Tracks
from rldbg.trace.chrome_text import COUNTER_LINE, Formatter, dumps, us

try:   # ISA-L's deflate (a dependency): 7x zlib's speed at its level 1 on a trace, and smaller
    from isal import igzip as gzip
except ImportError:   # where it is not installed (the GPU machine's bundle packs a fixed list)
    import gzip

_OTHERS = ("SELECT kind, ts, dur, step, flow, args FROM events WHERE kind NOT IN (SELECT id FROM kinds WHERE ph = 'C') "
           "ORDER BY seq")
_TEXT = (f"SELECT CAST(coalesce(group_concat(CASE WHEN c.pre IS NULL THEN char(0) ELSE {COUNTER_LINE} END, ''), '') "
         "AS BLOB) FROM events e LEFT JOIN temp.counters c ON c.id = e.kind WHERE e.seq >= ? AND e.seq < ?")
_CHUNK = 1 << 14   # events a chunk: written at once


def export_spill(spill_dir: str, out_path: str, extra=None, align_clocks: bool = True,
                 damage: list | None = None) -> dict:
    """The spill's store written beside `out_path` (rldbg.store.store_path_for), then the trace exported from it
    (export_store); returns {"events": n_in, "written": n_out, "path": out_path, "store": its path}. `damage`, when
    given, receives the spill's damaged regions (rldbg.trace.spill.iter_records)."""
    from rldbg.store import store_path_for
    from rldbg.store.ingest import from_spill
    from rldbg.trace.spill import read_meta
    read_meta(spill_dir)   # a spill that is not one is said first, before the output's directory is made
    _prepare_out(out_path)
    db = store_path_for(out_path)
    conn = from_spill(spill_dir, db, damage, exported_to=os.path.basename(out_path))
    try:
        return dict(export_store(conn, out_path, extra, align_clocks), store=db)
    finally:
        conn.close()


def export_store(conn, out_path: str, extra=None, align_clocks: bool = True) -> dict:
    """Write the Perfetto trace of the store open on `conn`; returns {"events", "written", "path"}. align_clocks=False
    writes each process's own timestamps (to see what the correction did). `extra(put, locate, origin_ns)` may add
    events of its own before the trailer: put(event dict) writes one, locate(role, rank) -> (pid, tid, clock offset ns
    to add to that rank's own timestamps) or None places it on a rank's track. The exporter knows nothing of who adds
    them (rldbg.trace.session passes the torch.profiler merge). The file: track metadata and the trace-start record
    first, then the events, what `extra` adds and the drop records, last the trailer."""
    _prepare_out(out_path)
    written = 0
    with no_gc():
        idx = Tracks.from_store(conn, align_clocks)
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
                 "args": idx.start_args(align_clocks)})
            kinds = {k[0]: k[1:] for k in conn.execute("SELECT id, proc, ph, cat, name, role, rank, method FROM kinds")}
            keys = dict(conn.execute("SELECT id, key FROM processes"))
            fmt = Formatter(idx, kinds, {proc: idx.offsets.get(key, 0) for proc, key in keys.items()})
            # Each chunk's counters as SQLite writes them, a NUL in the place of each other event, whose text the
            # Formatter writes. Where a second connection can read the store, a thread makes the next chunk's
            # counters and writes the file (gzip included) while this one formats: SQLite and the compressor let go of the GIL.
            second = _reader(conn)
            src = second or conn
            src.executescript("DROP TABLE IF EXISTS temp.counters; "
                              "CREATE TEMP TABLE counters (id INTEGER PRIMARY KEY, pre, q, r)")
            src.executemany("INSERT INTO temp.counters VALUES (?, ?, ?, ?)", fmt.counters())
            src.commit()   # the INSERT's transaction ended: `conn` is left as it came
            last = conn.execute("SELECT coalesce(max(seq), -1) FROM events").fetchone()[0]
            others = conn.execute(_OTHERS)
            with closing(second) if second else nullcontext(), ThreadPoolExecutor(1) as pool:
                start = _done
                with suppress(RuntimeError):   # at exit (an atexit export) no thread starts: all of it here
                    if second and pool.submit(int).result() == 0:
                        start = pool.submit
                counters, writes = start(_counter_text, src, 0), []
                for a in range(0, last + 1, _CHUNK):
                    texts, counters = counters.result().split(b"\0"), start(_counter_text, src, a + _CHUNK)
                    # fetchmany(0) would read all the rows left
                    lines = fmt.lines(others.fetchmany(len(texts) - 1) if len(texts) > 1 else ()) + [""]
                    writes.append(start(f.write, b"".join(chain.from_iterable(
                        zip(texts, [t.encode("utf-8", "replace") for t in lines])))))
                    if len(writes) > 2:   # two chunks at most wait in memory to be written
                        writes.pop(0).result()
                for w in writes:   # a write's error is raised here
                    w.result()
            if extra is not None:
                def locate(role, rank):
                    if rank not in idx.ranks.get(role, ()):
                        return None
                    return idx.roles[role], rank + 1, idx.offsets.get(idx.rank_proc.get((role, rank)), 0)
                extra(put, locate, idx.origin)
            for key, (dropped, t_sent) in sorted(idx.drops.items()):
                put({"ph": "i", "s": "t", "pid": 1, "tid": 1, "cat": "rldbg", "name": "events dropped",
                     "ts": us(max(t_sent - idx.origin, 0)), "args": {"process": key, "dropped": dropped}})
            # Last line carries no trailing comma; a writer that dies before it leaves a truncated
            # array, which Perfetto and rldbg report still read.
            total = sum(dropped for dropped, _ in idx.drops.values())
            f.write((dumps({"ph": "C", "pid": 1, "name": "rldbg dropped events", "ts": "0.000",
                             "args": {"total": total}}) + "\n]\n").encode("utf-8"))
    return {"events": idx.n, "written": written + idx.n + fmt.more + 1, "path": out_path}


def _reader(conn) -> sqlite3.Connection | None:
    """A read-only connection of its own to the store's file; None for a store in memory or one with
    writes not yet committed (another connection would not see them)."""
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    with suppress(sqlite3.Error):
        if path and not conn.in_transaction:
            return sqlite3.connect(Path(path).as_uri() + "?mode=ro", uri=True, check_same_thread=False)
    return None


def _counter_text(src, a: int) -> bytes:
    return src.execute(_TEXT, (a, a + _CHUNK)).fetchone()[0]


def _done(fn, *args) -> Future:
    """fn(*args) run now, as a finished Future: the export's steps in this thread alone."""
    (f := Future()).set_result(fn(*args))
    return f


def _open(path: str):
    """The output, checked by _prepare_out before any work. A regular file already there is
    removed first, not truncated: ext4 writes a file that was truncated and written again back to
    disk as it is closed (auto_da_alloc), where a new file's pages go to disk later, in the
    background. A symlink, a FIFO or a device at the path is written through."""
    with suppress(OSError):   # nothing there, or not ours to remove: opening it says what is wrong
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    if path.endswith(".gz"):
        # Level 1: zlib's is about twice its level 3's speed for a few % more bytes; ISA-L's is as fast as its others.
        return gzip.open(path, "wb", compresslevel=1)
    return open(path, "wb")


def _prepare_out(path: str) -> None:
    """The output's directory made, before any work: a path that cannot be written is a
    ValueError naming it and why, not a traceback after the spill was read."""
    if not (path.endswith(".json") or path.endswith(".json.gz")):
        raise ValueError(f"output {path!r} must end in .json or .json.gz")
    if os.path.isdir(path):
        raise ValueError(f"cannot write {path!r}: it is a directory")
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:   # a file where a directory should be
        raise ValueError(f"cannot write {path!r}: {e.filename!r} is not a directory") from None
    except OSError as e:
        raise ValueError(f"cannot write {path!r}: {e.strerror} ({e.filename})") from None


def _where(idx: Tracks, role: str, rank: int) -> dict:
    """The process behind role/rank's track: pid, host, node, clock ({} when no event named it)."""
    p = idx.procs.get(idx.rank_proc.get((role, rank)), {})
    return {k: p[k] for k in ("pid", "host", "node_id", "node_ip", "clock_offset_ns", "clock_uncertainty_ns") if k in p}
