"""A Chrome JSON trace from elsewhere (a run copied off a cluster, a flight-recorder dump, an
edited or damaged file) into a store, so that the report reads it as it reads a run's own.

Read tolerantly, array or {"traceEvents": [...]} form, plain or gzip; damage spoils only what it
touches: a cut or corrupt gzip stream keeps what inflated before it, a cut array its complete
events (as Perfetto does), a garbled region is skipped to the next event line, invalid UTF-8 is
replaced, and an event mangling ph, ts or dur is skipped and counted; one note per kind of damage.

The events go back into rldbg's columns by its export layout (rldbg.trace.chrome_text): role = process_name unless the
args name one, rank = args' "rank" or tid - 1, "rank N memory" / "rank N ledger" / "rank N gpuK memory" counters are the
samples, the "rldbg trace start" args the store's start. Only what the report reads is imported; a slice or sample of a
type rldbg never writes is left out and counted in the store's notes, as the report would count it.
"""
from __future__ import annotations

import contextlib
import json
import math
import re
import sqlite3
import zlib

import orjson

from rldbg.store import SUFFIX, TraceFileError, no_gc, schema, series
from rldbg.store.ingest import EventWriter
from rldbg.store.queries import KEPT_INSTANTS, SLICE_CATS
from rldbg.trace.chrome_text import args_json
from rldbg.trace.report_trace import bad_field, finite_number

_RANK_COUNTER = re.compile(r"^rank (\d+) (memory|ledger|gpu\d+ memory)$")
_DROPPED = "rldbg dropped events"   # the exporter's counter of events dropped before shipping
TRACE_START = "rldbg trace start"
_CHUNK = 1 << 16
_NEEDS_TS = {"X", "B", "E", "i", "I", "C", "D", "b", "e", "n", "s", "t", "f", "P", "O", "N"}


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
    return b"".join(out)   # at eof decompress() has returned everything: flush() holds nothing


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
            if nxt < 0:
                if (tail := text[i:].strip()) and tail not in ("]", "]}"):
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


def phases(events) -> tuple[dict, int]:
    """({ph: [valid events]}, how many were not valid), in one pass. Valid: a dict whose "ph" is
    a string, with a finite number (or its text) as "ts" where its phase has a time and as an
    "X"'s "dur" if any, and a dict as args if any. Inline: a call per event cost an eighth."""
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
        if got is None:   # not setdefault: it would build a list for each of a million events
            got = out[ph] = []
        got.append(e)
    return out, bad


def _load(path: str) -> tuple[list[dict], list[str], dict]:
    notes: list = []
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = _inflate(raw, notes)
    events, s = None, "["
    if not notes:
        with contextlib.suppress(orjson.JSONDecodeError):
            events = orjson.loads(raw)   # an intact trace, the common case: whole, at C speed
        if isinstance(events, dict):
            events = events.get("traceEvents")
    if not isinstance(events, list):
        events, s = None, _text(path, raw, notes).lstrip()
        if s.startswith("["):
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
        notes.append(f"{bad} malformed event(s) skipped (missing or bad ph/ts/dur/args)")
    if not good:
        raise TraceFileError(f"{path!r} holds no trace events (empty or cut before the first event)"
                             + (f"; {notes[0]}" if notes else ""))
    return good, notes, by_ph


def ts_ns(v) -> int:
    """Chrome JSON µs (number or exact-decimal string) → integer ns."""
    if type(v) is str and len(v) > 4 and v[-4] == ".":
        try:
            return int(v[:-4] + v[-3:])   # rldbg's own "123.456": exact, no float in between
        except ValueError:
            pass
    return int(round(float(v) * 1000))


def process_names(meta: list) -> dict:
    """pid -> role, from the process_name metadata (a name that is not a string names nothing,
    nor does a pid that cannot be a key: a list)."""
    return {e["pid"]: e["args"]["name"] for e in meta
            if e.get("ph") == "M" and e.get("name") == "process_name" and e.get("args") and "pid" in e
            and type(e["args"].get("name")) is str and type(e["pid"]).__hash__ is not None}


def _role_of_pid(names: dict, pid):
    try:
        return names.get(pid)
    except TypeError:   # an unhashable pid (a list): no process_name can name it
        return None


def _plain(v):
    return v if type(v) in (str, int, float, type(None)) and type(v) is not bool else args_json(v)


def from_chrome(path: str, db_path: str = ":memory:") -> sqlite3.Connection:
    """The store of the Chrome JSON trace at `path` (TraceFileError, one line, for what is not
    one); in memory unless `db_path` names a file."""
    with no_gc():
        try:
            _, notes, by_ph = _load(path)
        except TraceFileError as e:   # what its name promised, said too
            with open(path, "rb") as f:
                gz = f.read(2) == b"\x1f\x8b"
            raise TraceFileError(str(e) + ("; nor an rldbg store (no SQLite header)" if path.endswith(SUFFIX) else
                                           "; nor gzip data, though named .gz" if path.endswith(".gz") and not gz
                                           else "")) from None
        conn = schema.create(db_path)
        conn.execute("INSERT INTO processes (id, key) VALUES (1, ?)", (f"imported:{path}",))
        meta = by_ph.get("M", [])
        names = process_names(meta)
        _tracks(conn, meta, names)
        odd: dict = {}
        rows = _slices(by_ph.get("X", ()), names, odd)
        rows += _instants(conn, [e for ph in ("i", "I") for e in by_ph.get(ph, ())], names)
        samples, odd_samples, dropped = _counters(by_ph.get("C", ()), names)
        rows += samples
        out = EventWriter(conn)
        out.add(1, rows, args_are_text=True)
        out.close()
    for key, value in {"source": {"imported": path}, "notes": notes, "odd_fields": odd, "odd_samples": odd_samples,
                       "dropped_total": dropped}.items():
        schema.put(conn, key, value)
    series.write(conn, out.samples)
    schema.finish(conn)
    return conn


def _tracks(conn, meta: list, names: dict) -> None:
    """Each rank's track and the process behind it, from the thread_name metadata."""
    for e in meta:
        a = e.get("args") or {}
        if e.get("name") != "thread_name":
            continue
        role, tid = _role_of_pid(names, e.get("pid")), e.get("tid", 1)
        if role is None or not (role == "driver" or type(tid) is int):
            continue
        cur = conn.execute("INSERT INTO processes (key, pid, host, node_id, node_ip, clock_offset_ns, "
                           "clock_uncertainty_ns) VALUES (?,?,?,?,?,?,?)",
                           (f"{role}/{tid}", _plain(a.get("pid")), _plain(a.get("host")),
                            str(a.get("node_id") or "") if "node_id" in a else None, str(a.get("node_ip") or ""),
                            _plain(a.get("clock_offset_ns")), _plain(a.get("clock_uncertainty_ns"))))
        # the driver's process: one track per controller (tid = its track + 1; rldbg.store.tracks)
        conn.execute("INSERT INTO tracks (role, rank, proc) VALUES (?,?,?)",
                     (role, tid - 1 if type(tid) is int else 0, cur.lastrowid))


def _slices(events, names: dict, odd: dict) -> list:
    rows = []
    for e in events:
        cat = e.get("cat")
        if type(cat) is not str or cat not in SLICE_CATS:
            continue   # user spans and the like: not part of the analysis
        a = e.get("args") or {}
        if cat == "driver_call" and "mode" not in a:
            continue   # the dispatch/send/wait/recv parts of a driver call
        pid = e.get("pid")
        role = a["role"] if "role" in a else _role_of_pid(names, pid)
        role = f"pid {pid}" if role is None else role if type(role) is str else str(role)
        rec = {"name": e.get("name"), "rank": a.get("rank", 0), "step": a.get("step"), "method": a.get("method"),
               "flow": a.get("flow"), "args": a}
        if (why := bad_field(rec)) is not None:
            odd[why] = odd.get(why, 0) + 1
            continue
        rows.append(("X", cat, rec["name"], ts_ns(e["ts"]), ts_ns(e.get("dur", 0)), role, rec["rank"], rec["step"],
                     rec["method"], rec["flow"], args_json(a) if a else None))
    return rows


def _instants(conn, events: list, names: dict) -> list:
    rows = []
    for e in events:
        name = e.get("name")
        if type(name) is not str:
            continue
        a = e.get("args") or {}
        if name == TRACE_START:
            if schema.get(conn, "start") is None:
                schema.put(conn, "start", a)
            continue
        if name not in KEPT_INSTANTS:
            continue
        role = _role_of_pid(names, e.get("pid")) or "driver"
        tid = e.get("tid")
        rank = tid - 1 if type(tid) is int else 0   # the driver's tid: its controller's track + 1
        role, rank, step = _plain(a.get("role", role)), _plain(a.get("rank", rank)), _plain(a.get("step"))
        rows.append(("i", "rldbg", name, ts_ns(e["ts"]), 0, role, rank, step, None, None, args_json(a) if a else None))
    return rows


def _counters(events, names: dict) -> tuple[list, int, int]:
    """(rows of the memory, ledger and GPU samples, samples that were not numbers, drop total)."""
    rows, odd, dropped = [], 0, []
    for e in events:
        if not (args := e.get("args")):
            continue
        name = str(e.get("name", ""))
        if (m := _RANK_COUNTER.match(name)) is None and name != _DROPPED:
            continue
        good = {k: v for k, v in args.items() if finite_number(v)}
        odd += len(args) - len(good)
        if m is None:
            if "total" in good:
                dropped.append((ts_ns(e["ts"]), good["total"]))
            continue
        if not good:
            continue
        kind = m.group(2)
        cat = kind if kind in ("memory", "ledger") else "gpu"
        rows.append(("C", cat, kind, ts_ns(e["ts"]), 0, _role_of_pid(names, e.get("pid")), int(m.group(1)), None,
                     None, None, args_json(good)))
    return rows, odd, (sorted(dropped)[-1][1] or 0) if dropped else 0
