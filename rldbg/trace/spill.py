"""Spill files: what the collector persists as batches arrive, and how to read them back.

A spill directory holds `meta.json` (origin, job, config) and `events-<n>.jsonl`, one batch per
line: {"pid", "host", "dropped", "lost", "events": [[ph, cat, name, ts, dur, role, rank, step,
method, flow, args], ...]}, plus where the process runs ("node_id", "node_ip") and its clock
estimate when it sent the batch ("clock_offset_ns", "clock_rtt_ns": rldbg.trace.clock). A new trace starts a fresh spill (old event files are removed, never
appended to); a collector restarted after it died resumes with the next file.

Reading is damage-tolerant: a torn line, garbage, invalid UTF-8 or a malformed event is skipped
and, when a `damage` list is passed, recorded there as (file, byte offset, what) — so everything
valid before and after it still loads.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Iterator

EVENT_FIELDS = 11


class SpillError(ValueError):
    """One line naming the spill file and what is wrong with it."""


def meta_path(spill_dir: str) -> str:
    return os.path.join(spill_dir, "meta.json")


def read_meta(spill_dir: str) -> dict:
    if not os.path.isdir(spill_dir):
        raise FileNotFoundError(f"spill directory not found: {spill_dir!r}")
    path = meta_path(spill_dir)
    try:
        with open(path, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise SpillError(f"{spill_dir!r} is not an rldbg spill directory (no meta.json)") from None
    except (ValueError, OSError) as e:   # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise SpillError(f"{path}: damaged ({type(e).__name__}: {str(e).splitlines()[0][:120]}); expected the "
                         "JSON object rldbg wrote (origin_ns, job_id, ...)") from None
    if not isinstance(meta, dict):
        raise SpillError(f"{path}: damaged (a JSON {type(meta).__name__}, expected an object with origin_ns, job_id)")
    return meta


def event_files(spill_dir: str) -> list[str]:
    def num(p):
        try:
            return int(p.rsplit("-", 1)[1].split(".")[0])
        except ValueError:
            return -1
    return sorted((p for p in glob.glob(os.path.join(spill_dir, "events-*.jsonl")) if num(p) >= 0), key=num)


def _valid_event(ev) -> bool:
    return (type(ev) is list and len(ev) == EVENT_FIELDS and isinstance(ev[0], str)
            and type(ev[3]) is int and type(ev[4]) is int and type(ev[6]) is int)


def iter_batches(spill_dir: str, damage: list | None = None) -> Iterator[dict]:
    """Valid batches in arrival order; each batch's events are the valid ones only."""
    for path in event_files(spill_dir):
        offset = 0
        with open(path, "rb") as f:
            for raw in f:
                at, offset = offset, offset + len(raw)
                try:
                    batch = json.loads(raw)   # bytes: json detects UTF-8 and rejects invalid bytes
                    if not isinstance(batch, dict) or not isinstance(batch.get("events", []), list):
                        raise ValueError("not a batch object")
                except ValueError as e:
                    if damage is not None:
                        what = "torn last line" if not raw.endswith(b"\n") else f"unreadable line ({str(e)[:80]})"
                        damage.append((path, at, what))
                    continue
                evs = batch.get("events") or []
                good = [ev for ev in evs if _valid_event(ev)]
                if len(good) != len(evs):
                    if damage is not None:
                        damage.append((path, at, f"{len(evs) - len(good)} malformed event(s) in a batch"))
                    batch["events"] = good
                yield batch


def iter_events(spill_dir: str) -> Iterator[tuple[dict, list]]:
    """(batch meta, event) pairs in arrival order."""
    for batch in iter_batches(spill_dir):
        for ev in batch.get("events", ()):
            yield batch, ev


def damage_summary(damage: list) -> str:
    """'events-1.jsonl at byte 1234: torn last line; ... (+N more)' for a one-line warning."""
    parts = [f"{p} at byte {off}: {what}" for p, off, what in damage[:3]]
    more = f" (+{len(damage) - 3} more)" if len(damage) > 3 else ""
    return "; ".join(parts) + more


class SpillWriter:
    """Append-only, one file per ~64 MB so a huge run never rewrites one giant file."""

    ROTATE = 64 * 1024 * 1024

    def __init__(self, spill_dir: str, meta: dict, resume: bool = False):
        os.makedirs(spill_dir, exist_ok=True)
        self.dir, self.n, self.f = spill_dir, 0, None
        existing = event_files(spill_dir)
        if resume:
            # A restarted collector: keep what the dead one wrote, continue in the next file.
            self.n = int(existing[-1].rsplit("-", 1)[1].split(".")[0]) if existing else 0
        else:
            for p in existing:   # a new trace never appends to an old one
                os.remove(p)
        with open(meta_path(spill_dir), "w") as f:
            json.dump(meta, f)
        self._open()

    def _open(self) -> None:
        if self.f:
            self.f.close()
        self.n += 1
        self.f = open(os.path.join(self.dir, f"events-{self.n}.jsonl"), "w", encoding="utf-8")

    def write(self, batch: dict) -> None:
        self.f.write(json.dumps(batch, default=str, separators=(",", ":")) + "\n")
        self.f.flush()   # each batch on disk as it arrives: a crash loses nothing received
        if self.f.tell() > self.ROTATE:
            self._open()

    def write_raw(self, meta: dict, events_json: bytes) -> None:
        """A batch whose events are already a JSON array (encoded by the shipping process)."""
        head = json.dumps(meta, default=str, separators=(",", ":"))
        self.f.write(head[:-1] + ("," if len(head) > 2 else "") + '"events":')
        self.f.flush()
        self.f.buffer.write(events_json)
        self.f.write("}\n")
        self.f.flush()
        if self.f.tell() > self.ROTATE:
            self._open()

    def close(self) -> None:
        if self.f:
            self.f.close()
            self.f = None
