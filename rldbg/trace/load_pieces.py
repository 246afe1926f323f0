"""Reading a trace a piece at a time, for `rldbg report`: the events of each piece of the file,
split by phase by the one validity rule (rldbg.trace.load.phases), handed to a sink that keeps
what it needs, then dropped; with two cores or more, the last part of a big file is read by a
forked process at the same time and its sink sent back.

Why pieces: one parse of a million-event file faulted in 1.4 GB page by page (0.8 s of system
time in this VM); pieces of about _PIECE bytes reuse the memory the last one freed while it is
in the cache, and parsing and freeing a million events takes 0.85 s instead of 2.2 s.

What is read this way: an intact JSON array written one event per line, as rldbg's exporter
writes it. A piece is cut only at a line end, and a cut inside an event or inside any nesting
leaves a piece that is not JSON: a piece parses only when each of its cuts lies between two
events. Anything else (pretty-printed, the object form, a file on one line that is damaged, NaN,
gzip damage) is read whole by rldbg.trace.load's tolerant path, with the same notes.

The sink: new() makes one; sink.add(by_phase) takes a piece's events ({ph: [events]});
sink.spawn() makes one for later pieces that knows what the pieces so far taught (read in the
other process); sink.merge(later) appends what such a sink took. Sinks must pickle.
"""
from __future__ import annotations

from rldbg.trace.forked import Forked, HelperLost
from rldbg.trace.load import _load, _malformed, _read_bytes, no_gc, orjson, phases

_PIECE = 1 << 18          # bytes of JSON text per piece
_SIDE_BY_SIDE = 8 << 20   # a file at least this big is read by two processes when two cores are free
# The forked helper's share of the file: less than half, since it also pickles what it read and
# the parent unpickles it (together about a third of reading it, on a million events).
_HELPER_SHARE = 0.42


class _NotInLines(Exception):
    """A piece of the text did not parse on its own: read the whole trace the tolerant way."""


def read_by_phase(path: str, new, jobs: int = 1) -> tuple:
    """(sink, damage notes): the trace's valid events handed to a sink from new(), a piece at a
    time where the file allows it (else in one piece, to a new sink if some were handed over);
    `jobs` > 1: the file's last part in a forked process (only from a process without threads:
    the report's CLI). The notes are rldbg.trace.load.load_trace()'s."""
    notes: list = []
    with no_gc():
        raw = _read_bytes(path, notes)
        if orjson is not None and not notes and raw[:64].lstrip()[:1] == b"[":
            try:
                sink, bad = _in_pieces(raw, new, jobs)
                return sink, [_malformed(bad)] if bad else []
            except _NotInLines:
                pass
        _, notes, by_ph = _load(path, raw, notes)
        del raw
        sink = new()
        sink.add(by_ph)
        return sink, notes


def _bounds(raw: bytes) -> tuple[int, int]:
    """Where the array's events lie: after its '[', before its ']' (nothing else around them)."""
    begin, end = raw.find(b"[") + 1, raw.rfind(b"]")
    if begin == 0 or end < begin or raw[:begin - 1].strip() or raw[end + 1:].strip():
        raise _NotInLines
    return begin, end


def _pieces(raw: bytes, pos: int, end: int):
    """The event lists of raw[pos:end], a line-cut piece at a time (pos at a line's start)."""
    loads = orjson.loads
    while pos < end:
        cut = raw.find(b"\n", pos + _PIECE, end)
        cut = end if cut < 0 else cut
        piece = raw[pos:cut].rstrip()
        pos = cut + 1
        if piece.endswith(b","):
            piece = piece[:-1]   # the comma before the next piece's first event
        if not piece.strip():
            continue
        text = b"[" + piece + b"]"
        try:
            got = loads(text)
        except orjson.JSONDecodeError:
            raise _NotInLines from None
        yield got


def _feed(raw: bytes, pos: int, end: int, sink) -> int:
    """Hands raw[pos:end]'s pieces to sink; returns how many events were not valid."""
    bad = 0
    for got in _pieces(raw, pos, end):
        by_ph, n = phases(got)
        bad += n
        sink.add(by_ph)
    return bad


def _in_pieces(raw: bytes, new, jobs: int) -> tuple:
    begin, end = _bounds(raw)
    sink = new()
    if jobs < 2 or end - begin < _SIDE_BY_SIDE:
        return sink, _feed(raw, begin, end, sink)
    first = raw.find(b"\n", begin + _PIECE, end)
    mid = raw.find(b"\n", end - int((end - first) * _HELPER_SHARE), end) if first >= 0 else -1
    if mid < 0:
        return sink, _feed(raw, begin, end, sink)
    # The first piece here first: in rldbg's layout it names the processes, which the other
    # half's sink then knows (spawn()) instead of holding its samples until the end.
    bad = _feed(raw, begin, first, sink)
    later = sink.spawn()
    with Forked(lambda: (_feed(raw, mid + 1, end, later), later)) as helper:
        bad += _feed(raw, first + 1, mid, sink)
        try:
            more, later = helper.result()   # _NotInLines from the helper is raised here
        except HelperLost:   # its part is read here instead
            return sink, bad + _feed(raw, mid + 1, end, sink)
    sink.merge(later)
    return sink, bad + more
