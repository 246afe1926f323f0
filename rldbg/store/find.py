"""Which store a path given to `rldbg report` means: a store itself; a run's Perfetto export, whose
store lies beside it (rldbg.store.store_path_for); or a Chrome JSON trace from elsewhere,
imported into a store in memory (rldbg.store.chrome_import). Anything else is one line naming it.
"""
from __future__ import annotations

import os
import sqlite3

from rldbg.store import TraceFileError, is_store, schema, store_path_for


def open_for(path: str) -> sqlite3.Connection:
    """The store `path` means (module docstring); TraceFileError (one line) for what it cannot be."""
    if not os.path.exists(path):
        raise TraceFileError(f"trace file not found: {path!r}")
    if os.path.isdir(path):
        raise TraceFileError(f"{path!r} is a directory; give a store (.rldbg.db) or a .json/.json.gz trace "
                             f"(a spill directory needs `rldbg export DIR -o trace.json` first)")
    if is_store(path):
        try:
            return schema.open_store(path)
        except schema.StoreError as e:
            raise TraceFileError(str(e)) from None
    beside = store_path_for(path)
    if beside != path and is_store(beside):
        try:
            conn = schema.open_store(beside)
        except schema.StoreError:
            conn = None   # a store cut short beside it: the trace itself is read instead
        if conn is not None:
            if schema.get(conn, "exported_to") == os.path.basename(path):
                return conn
            conn.close()   # the store of another export of the same name: not this file's
    from rldbg.store.chrome_import import from_chrome
    return from_chrome(path)
