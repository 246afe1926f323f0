"""The run as a store: one SQLite file per trace that the report and the Perfetto export query
(rldbg.store.schema lays out its tables).

Why SQLite: it is in Python's standard library, so the store adds no dependency to an rldbg that
must install beside a user's own Ray and torch (DuckDB is a 50 MB wheel); the file is one
self-describing database any language or the `sqlite3` shell can open; what the report asks of it
(a few categories' events among a million) it answers in one pass without a column engine; and a
store cut short is refused, as it lacks its "complete" mark. A run's store sits beside its Perfetto
export, `trace.json.gz` and `trace.rldbg.db` (store_path_for); a trace from elsewhere is imported
into a store first (rldbg.store.chrome_import).
"""
from __future__ import annotations

import contextlib
import gc

SUFFIX = ".rldbg.db"


class TraceFileError(ValueError):
    """One line saying why a path given to `rldbg report` is no trace nor store."""


@contextlib.contextmanager
def no_gc():
    """The cyclic GC off while a trace's millions of containers are built (a store written, read or exported): they form
    no cycles, and every GC pass would walk all those built so far, a third of the time at 1M events."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def base_of(trace_path: str) -> str:
    """A trace path without its .json / .json.gz / store suffix."""
    for ext in (SUFFIX, ".json.gz", ".json"):
        if trace_path.endswith(ext):
            return trace_path[: -len(ext)]
    return trace_path


def store_path_for(trace_path: str) -> str:
    """Where the store of the trace exported to `trace_path` lives: beside it, `<base>.rldbg.db`."""
    return base_of(trace_path) + SUFFIX


def is_store(path: str) -> bool:
    """Whether the file at `path` is an SQLite database (by its header, not its name)."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


__all__ = ["SUFFIX", "TraceFileError", "base_of", "is_store", "no_gc", "store_path_for"]
