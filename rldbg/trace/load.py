"""Reading a Chrome JSON trace back (for `rldbg report`), tolerant of a writer that died.

Accepts the array form and the {"traceEvents": [...]} object form, plain or gzip. Damage never
raises past what it spoils: a gzip stream cut short or corrupt keeps what inflated before it, a
JSON array cut short keeps the complete events before the cut (as Perfetto does), a garbled
region is skipped up to the next event line, invalid UTF-8 is replaced, and an event missing or
mangling a field the analysis needs (ph, ts, dur) is skipped and counted. load_trace() returns the
events with one note per kind of damage; load_events() is the same without the notes.
rldbg.store.chrome_import lays them into a store for `rldbg report`.
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import zlib

try:   # 3-4x the stdlib's speed on a whole trace; the stdlib path stays for what it refuses (NaN)
    import orjson
except ImportError:   # pragma: no cover - a dependency; the stdlib reads the same files
    orjson = None

_CHUNK = 1 << 16
_NEEDS_TS = {"X", "B", "E", "i", "I", "C", "D", "b", "e", "n", "s", "t", "f", "P", "O", "N"}


class TraceFileError(ValueError):
    pass


def _inflate(raw: bytes, notes: list) -> bytes:
    d, out = zlib.decompressobj(16 + zlib.MAX_WBITS), []
    for i in range(0, len(raw), _CHUNK):
        try:
            out.append(d.decompress(raw[i:i + _CHUNK]))
        except zlib.error as e:
            notes.append(f"gzip data corrupt near compressed byte {i} ({e}); kept what inflated before it")
            return b"".join(out)
        if d.eof:
            break
    if not d.eof:
        notes.append("gzip stream truncated (the writer stopped before its end)")
    else:
        try:
            out.append(d.flush())
        except zlib.error:
            pass
    return b"".join(out)


def _read_bytes(path: str, notes: list) -> bytes:
    if not os.path.exists(path):
        raise TraceFileError(f"trace file not found: {path!r}")
    if os.path.isdir(path):
        raise TraceFileError(f"{path!r} is a directory; give a .json or .json.gz trace "
                             f"(a spill directory needs `rldbg export DIR -o trace.json` first)")
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = _inflate(raw, notes)
    return raw


def _text(path: str, raw: bytes, notes: list) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if raw[:1] not in (b"[", b"{", b" ", b"\n") and e.start < 16:
            raise TraceFileError(f"{path!r} is not a Chrome JSON trace (not UTF-8 text)") from None
        notes.append(f"invalid UTF-8 at byte {e.start} (replaced)")
        return raw.decode("utf-8", errors="replace")


def _scan_array(text: str, start: int, notes: list) -> list:
    """Decode events one by one from text[start] == '['; a bad region is skipped to the next
    line that starts an object; the end of the text without ']' is a truncation."""
    dec, out, i, n = json.JSONDecoder(), [], start + 1, len(text)
    closed = False
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            break
        if text[i] == "]":
            closed = True
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            nxt = text.find("\n{", i + 1)
            tail = text[i:].strip()
            if nxt < 0:
                if tail and tail not in ("]", "]}"):
                    notes.append(f"truncated: the last event is cut at character {i} (after {len(out)} events)")
                closed = True   # said once, not twice
                break
            notes.append(f"unreadable JSON at character {i}; skipped to the next event")
            i = nxt + 1
            continue
        out.append(obj)
    if not closed:
        notes.append(f"truncated: the event array ends without ']' after {len(out)} events")
    return out


@contextlib.contextmanager
def no_gc():
    """The cyclic GC off while a trace's millions of containers are built (reading a trace, or a
    spill in the exporter): they form no cycles, and every GC pass would walk all those built so
    far, a third of the time at 1M events."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def phases(events) -> tuple[dict, int]:
    """{ph: [events]} of the valid events, in one pass so that each analysis walks only the
    events it reads, and how many events were not valid. Valid: a dict whose "ph" is a string,
    with a finite number (or its text) as "ts" where its phase has a time, and as "dur" if it
    has one on an "X", and args a dict if any. The rule is written out here, in the loop, and
    nowhere else: a function call per event cost an eighth of this pass."""
    out, bad, needs_ts, finite = {}, 0, _NEEDS_TS, math.isfinite
    for e in events:
        try:
            ph = e["ph"]   # of what JSON holds only a dict has it: a list or a string is a TypeError
            if type(ph) is not str:
                raise TypeError
            if ph in needs_ts:
                # finite: json.loads, the tolerant reader, reads NaN and Infinity (orjson does not)
                if not finite(float(e["ts"])):
                    raise ValueError
                if ph == "X" and not finite(float(e.get("dur", 0))):
                    raise ValueError
            a = e.get("args")
            if a is not None and type(a) is not dict:
                raise TypeError
        except (KeyError, TypeError, ValueError, OverflowError):   # OverflowError: float(10**400)
            bad += 1
            continue
        got = out.get(ph)
        if got is None:
            got = out[ph] = []
        got.append(e)
    return out, bad


def _malformed(bad: int) -> str:
    return f"{bad} malformed event(s) skipped (missing or bad ph/ts/dur/args)"


def load_trace(path: str) -> tuple[list[dict], list[str]]:
    """(events, damage notes), all events at once. The notes are empty for an intact trace."""
    with no_gc():
        events, notes, _ = _load(path)
    return events, notes


def _load(path: str, raw: bytes | None = None, notes: list | None = None) -> tuple[list[dict], list[str], dict]:
    """Read (or given: raw as _read_bytes left it, and its notes), parsed, split by phase."""
    if raw is None:
        notes = []
        raw = _read_bytes(path, notes)
    events = None
    if orjson is not None and not notes:
        try:
            events = orjson.loads(raw)   # an intact trace, the common case: whole, at C speed
        except orjson.JSONDecodeError:
            events = None
        if isinstance(events, dict):
            events = events.get("traceEvents")
    if isinstance(events, list):
        s = "["
    else:
        events = None
        s = _text(path, raw, notes).lstrip()
    if events is not None:
        pass
    elif s.startswith("["):
        try:
            events = json.loads(s)   # whole (NaN and Infinity included, which orjson refuses)
        except ValueError:
            events = _scan_array(s, 0, notes)
    elif s.startswith("{"):
        try:
            doc = json.loads(s)
            events = doc.get("traceEvents") if isinstance(doc, dict) else None
        except ValueError:
            k = s.find('"traceEvents"')
            b = s.find("[", k) if k >= 0 else -1
            events = _scan_array(s, b, notes) if b >= 0 else None
    if not isinstance(events, list) or not events and not s.startswith("["):
        raise TraceFileError(f"{path!r} is not a Chrome JSON trace (expected an array of events "
                             f"or an object with traceEvents)")
    by_ph, bad = phases(events)
    # An intact trace (the common case) is the parsed list itself; only a damaged one is copied,
    # in its order, keeping the events phases() kept.
    good = events
    if bad:
        kept = {id(e) for got in by_ph.values() for e in got}
        good = [e for e in events if id(e) in kept]
        notes.append(_malformed(bad))
    if not good:
        raise TraceFileError(f"{path!r} holds no trace events (empty or cut before the first event)"
                             + (f"; {notes[0]}" if notes else ""))
    return good, notes, by_ph


def load_events(path: str) -> list[dict]:
    return load_trace(path)[0]


def ts_ns(v) -> int:
    """Chrome JSON µs (number or exact-decimal string) → integer ns."""
    if type(v) is str and len(v) > 4 and v[-4] == ".":
        try:
            return int(v[:-4] + v[-3:])   # rldbg's own "123.456": exact, no float in between
        except ValueError:
            pass
    return int(round(float(v) * 1000))
