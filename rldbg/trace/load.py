"""Reading a Chrome JSON trace back (for `rldbg report`), tolerant of a writer that died.

Accepts the array form (possibly truncated: complete events before the cut are kept, as
Perfetto does) and the {"traceEvents": [...]} object form, plain or gzip.
"""
from __future__ import annotations

import gzip
import json
import os
import zlib


class TraceFileError(ValueError):
    pass


def _read_text(path: str) -> str:
    if not os.path.exists(path):
        raise TraceFileError(f"trace file not found: {path!r}")
    if os.path.isdir(path):
        raise TraceFileError(f"{path!r} is a directory; give a .json or .json.gz trace "
                             f"(a spill directory needs `rldbg export DIR -o trace.json` first)")
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        # decompressobj keeps what inflates from a gzip cut short by a crash
        raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TraceFileError(f"{path!r} is not a Chrome JSON trace (not UTF-8 text)") from None


def _scan_array(text: str, start: int) -> list:
    """Decode events one by one from text[start] == '['; stop quietly at a truncation."""
    dec, out, i, n = json.JSONDecoder(), [], start + 1, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            obj, i = dec.raw_decode(text, i)
        except ValueError:
            break
        out.append(obj)
    return out


def load_events(path: str) -> list[dict]:
    text = _read_text(path)
    s = text.lstrip()
    events = None
    if s.startswith("["):
        events = _scan_array(s, 0)
    elif s.startswith("{"):
        try:
            doc = json.loads(s)
            events = doc.get("traceEvents") if isinstance(doc, dict) else None
        except ValueError:
            k = s.find('"traceEvents"')
            b = s.find("[", k) if k >= 0 else -1
            events = _scan_array(s, b) if b >= 0 else None
    if not isinstance(events, list) or not events and not s.startswith("["):
        raise TraceFileError(f"{path!r} is not a Chrome JSON trace (expected an array of events "
                             f"or an object with traceEvents)")
    events = [e for e in events if isinstance(e, dict) and "ph" in e]
    if not events:
        raise TraceFileError(f"{path!r} holds no trace events (empty or cut before the first event)")
    return events


def ts_ns(v) -> int:
    """Chrome JSON µs (number or exact-decimal string) → integer ns."""
    return int(round(float(v) * 1000))
