"""The report's Trace of some Chrome JSON events, for tests that write events by hand: the events
go through a file and the report's own reading (imported into a store, read back by its queries),
as `rldbg report` reads a trace from elsewhere; a trace file's events, for tests that look at
what the export wrote; and a spill's batches, for tests that look at what reached the collector."""
from __future__ import annotations

import json
import os
import tempfile

from rldbg.store.chrome_import import _load
from rldbg.trace.spill import iter_records
from rldbg.trace.report import Trace, read_trace


def trace_of(events: list) -> Trace:
    fd, path = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(events, f)
        return read_trace(path)
    finally:
        os.remove(path)


def load_trace(path: str) -> tuple[list[dict], list[str]]:
    """(events, damage notes) of a trace file, all at once, as the importer's tolerant reader
    loads them; the notes are empty for an intact trace."""
    events, notes, _ = _load(path)
    return events, notes


def load_events(path: str) -> list[dict]:
    """The trace file's events as the tolerant reader loads them (damage notes dropped)."""
    return load_trace(path)[0]


def iter_batches(spill_dir: str, damage: list | None = None):
    """A spill's valid batches in arrival order, as {meta..., "events": [event lists]}."""
    for meta, evs in iter_records(spill_dir, damage):
        meta["events"] = evs
        yield meta
