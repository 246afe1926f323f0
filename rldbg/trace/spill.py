"""Spill files: what the collector persists as batches arrive, and how to read them back.

A spill directory holds `meta.json` (origin, job, config) and `events-<n>.rlb`, binary records
appended one per batch, each:

    MAGIC (4 bytes, b"\\xc1RLB") | meta_len, events_len, crc32 (3 x uint32 little-endian) |
    meta (msgpack map) | events (msgpack array of 11-field arrays: rldbg.trace.events)

meta: {"pid", "host", "dropped", "lost", ...}, its node and clock estimate (rldbg.trace.clock).
The events are packed by the shipping process and written as is; crc32 covers meta then events.
0xc1 is a byte msgpack never uses, so a reader that lost its place resynchronises on the next
MAGIC. A new trace starts a fresh spill (old event files are removed, never appended to).

Reading is damage-tolerant: a torn last record, garbage, a bad checksum or msgpack, a malformed
event is skipped and, given a `damage` list, noted there as (file, byte offset, what); everything
valid around it still loads. A spill in the older JSON-lines format is refused in one line.
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import struct
import threading
import zlib
from operator import itemgetter
from typing import Iterator

import msgpack

EVENT_FIELDS = 11
MAGIC = b"\xc1RLB"
_HEAD = struct.Struct("<4sIII")
EXT = ".rlb"
OLD_EXT = ".jsonl"
TORN = "torn last record"


class SpillError(ValueError):
    """One line naming the spill file and what is wrong with it."""


def meta_path(spill_dir: str) -> str:
    return os.path.join(spill_dir, "meta.json")


def read_meta(spill_dir: str) -> dict:
    if not os.path.isdir(spill_dir):
        if os.path.exists(spill_dir):
            raise SpillError(f"{spill_dir!r} is a file, not a spill directory (a run's RUN/trace.spill)")
        raise FileNotFoundError(f"spill directory not found: {spill_dir!r}")
    path = meta_path(spill_dir)
    try:
        with open(path, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        inside = sorted(glob.glob(os.path.join(glob.escape(spill_dir), "*.spill")))   # a run's directory given
        raise SpillError(f"{spill_dir!r} is not an rldbg spill directory (no meta.json)"
                         + (f"; the spill in it: {inside[0]!r}" if inside else "")) from None
    except (ValueError, OSError) as e:   # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise SpillError(f"{path}: damaged ({type(e).__name__}: {str(e).splitlines()[0][:120]}); expected the "
                         "JSON object rldbg wrote (origin_ns, job_id, ...)") from None
    if not isinstance(meta, dict):
        raise SpillError(f"{path}: damaged (a JSON {type(meta).__name__}, expected an object with origin_ns, job_id)")
    return meta


def _files(spill_dir: str, ext: str) -> list[str]:
    """events-<n><ext> of the spill, by n."""
    found = {p: re.fullmatch(r"events-([0-9]+)" + re.escape(ext), os.path.basename(p))
             for p in glob.glob(os.path.join(spill_dir, "events-*" + ext))}
    return sorted((p for p, m in found.items() if m), key=lambda p: int(found[p][1]))


def event_files(spill_dir: str) -> list[str]:
    """The spill's event files in write order. A spill holding only the old JSON-lines files
    (written by an rldbg before the binary format) is a SpillError naming the format."""
    files = _files(spill_dir, EXT)
    if not files and (old := _files(spill_dir, OLD_EXT)):
        raise SpillError(f"{spill_dir!r} is a spill in the old JSON-lines format ({os.path.basename(old[0])}, "
                         f"written by an older rldbg); this rldbg reads only binary spills (events-N{EXT}): "
                         f"export it with the rldbg that wrote it")
    return files


def encode_events(events: list) -> bytes:
    """A batch's events as the msgpack array the spill stores (unknown types as str)."""
    try:
        return msgpack.packb(events, default=str, use_bin_type=True, unicode_errors="surrogatepass")
    except (OverflowError, ValueError, TypeError):
        # An int beyond 64 bits (or a type msgpack refuses outright): as JSON would write it.
        return msgpack.packb(json.loads(json.dumps(events, default=str)), use_bin_type=True,
                             unicode_errors="surrogatepass")


_packers = threading.local()   # a Packer is not safe to share between threads (its buffer)


def pack_event(ev) -> bytes:
    """One event as encode_events writes it in a batch: what a recorder buffers, as bytes the garbage collector
    never sees (buffered tuples and dicts reach its old generation and bring on full collections of the process)."""
    try:
        packer = _packers.p
    except AttributeError:
        packer = _packers.p = msgpack.Packer(default=str, use_bin_type=True, unicode_errors="surrogatepass")
    try:
        return packer.pack(ev)
    except (OverflowError, ValueError, TypeError):
        return encode_events(ev)   # its fallback, for this event alone (an event packs as the array it is)


def join_packed(packed: list) -> bytes:
    """Events packed one by one (pack_event) as the batch encode_events writes of them."""
    return msgpack.Packer().pack_array_header(len(packed)) + b"".join(packed)


def decode_events(data, tuples: bool = False) -> list:
    """A msgpack events array (as the shipper sends it) -> list of event lists (as JSON gave them:
    lists inside args stay lists), or with tuples=True a tuple of tuples (cheaper to build; for
    readers that only write them out again, like the exporter)."""
    return msgpack.unpackb(data, use_list=not tuples, raw=False, strict_map_key=False)


_I64 = range(-(1 << 63), 1 << 63)   # a time or a rank beyond 64 bits is no time or rank rldbg writes (nor SQLite holds)


def _valid_event(ev, seq=list) -> bool:
    return (type(ev) is seq and len(ev) == EVENT_FIELDS and isinstance(ev[0], str)
            and type(ev[3]) is int and type(ev[4]) is int and type(ev[6]) is int
            and ev[3] in _I64 and ev[4] in _I64 and ev[6] in _I64)


_PH, _TS, _DUR, _RANK = itemgetter(0), itemgetter(3), itemgetter(4), itemgetter(6)


def _check(evs, seq=list):
    """The batch's valid events (the batch itself when all are: the common case, checked at C speed)."""
    if type(evs) is not seq:
        return seq()
    with contextlib.suppress(TypeError):
        if (set(map(type, evs)) <= {seq} and set(map(len, evs)) <= {EVENT_FIELDS}
                and set(map(type, map(_PH, evs))) <= {str} and set(map(type, map(_TS, evs))) <= {int}
                and set(map(type, map(_DUR, evs))) <= {int} and set(map(type, map(_RANK, evs))) <= {int}
                and all(min(map(f, evs), default=0) in _I64 and max(map(f, evs), default=0) in _I64
                        for f in (_TS, _DUR, _RANK))):
            return evs
    return seq(ev for ev in evs if _valid_event(ev, seq))


def iter_records(spill_dir: str, damage: list | None = None, tuples: bool = False) -> Iterator[tuple[dict, list]]:
    """(batch meta, valid event lists) for each readable record, in arrival order; with
    tuples=True the events (and any lists inside them) are tuples. A record whose meta or events
    do not decode is left out, malformed events are dropped, each noted in `damage`."""
    seq = tuple if tuples else list
    for path in event_files(spill_dir):
        with open(path, "rb") as f:
            data = f.read()
        for at, mb, eb in _file_records(path, data, damage):
            try:
                meta = msgpack.unpackb(mb, raw=False, strict_map_key=False)
                if not isinstance(meta, dict):
                    raise ValueError("not a batch record")
                evs = decode_events(eb, tuples)
            except Exception as e:
                if damage is not None:
                    damage.append((path, at, f"unreadable record ({str(e)[:80]})"))
                continue
            good = _check(evs, seq)
            if len(good) != (len(evs) if type(evs) is seq else -1) and damage is not None:
                bad = len(evs) - len(good) if type(evs) is seq else "all"
                damage.append((path, at, f"{bad} malformed event(s) in a batch"))
            yield meta, good


def _file_records(path: str, data: bytes, damage: list | None):
    """(offset, meta bytes, events bytes) of the intact records of one file's bytes."""
    view, n, at = memoryview(data), len(data), 0
    while at < n:
        bad = None
        if data[at:at + 4] != MAGIC:
            nxt = data.find(MAGIC, at + 1)
            torn = n - at < 4 and MAGIC.startswith(data[at:])
            bad = TORN if torn else f"{(nxt if nxt >= 0 else n) - at} unreadable byte(s)"
        elif at + _HEAD.size > n:
            bad = TORN
        else:
            _, mlen, elen, crc = _HEAD.unpack_from(data, at)
            body, end = at + _HEAD.size, at + _HEAD.size + mlen + elen
            if end > n:
                bad = "record cut short" if data.find(MAGIC, at + 1) >= 0 else TORN
            else:
                mb, eb = view[body:body + mlen], view[body + mlen:end]
                if zlib.crc32(eb, zlib.crc32(mb)) != crc:
                    bad = "corrupt record (checksum mismatch)"
        if bad is None:
            yield at, mb, eb
            at = end
            continue
        if damage is not None:
            damage.append((path, at, bad))
        at = -1 if bad == TORN else data.find(MAGIC, at + 1)   # resynchronise on the next record
        if at < 0:
            break


def damage_summary(damage: list) -> str:
    """'events-1.rlb at byte 1234: torn last record; ... (+N more)' for a one-line warning."""
    parts = [f"{p} at byte {off}: {what}" for p, off, what in damage[:3]]
    more = f" (+{len(damage) - 3} more)" if len(damage) > 3 else ""
    return "; ".join(parts) + more


class SpillWriter:
    """Append-only, one file per ~64 MB so a huge run never rewrites one giant file."""

    ROTATE = 64 * 1024 * 1024

    def __init__(self, spill_dir: str, meta: dict):
        os.makedirs(spill_dir, exist_ok=True)
        self.dir, self.n, self.f = spill_dir, 0, None
        for p in _files(spill_dir, EXT) + _files(spill_dir, OLD_EXT):   # a new trace never appends to an old one
            os.remove(p)
        with open(meta_path(spill_dir), "w") as f:
            json.dump(meta, f)
        self._open()

    def _open(self) -> None:
        if self.f:
            self.f.close()
        self.n += 1
        self.f = open(os.path.join(self.dir, f"events-{self.n}{EXT}"), "wb")

    def write(self, batch: dict) -> None:
        """A batch as a dict with its events under "events" (encoded here)."""
        meta = {k: v for k, v in batch.items() if k != "events"}
        self.write_raw(meta, encode_events(list(batch.get("events") or ())))

    def write_raw(self, meta: dict, events: bytes) -> None:
        """A batch whose events are already a msgpack array (encoded by the shipping process)."""
        mb = msgpack.packb(meta, default=str, use_bin_type=True)
        self.f.write(_HEAD.pack(MAGIC, len(mb), len(events), zlib.crc32(events, zlib.crc32(mb))) + mb)
        self.f.write(events)
        self.f.flush()   # each batch on disk as it arrives: a crash loses nothing received
        if self.f.tell() > self.ROTATE:
            self._open()

    def close(self) -> None:
        if self.f:
            self.f.close()
            self.f = None
