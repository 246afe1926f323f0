"""Spill files: what the collector persists as batches arrive, and how to read them back.

A spill directory holds `meta.json` (origin, job, config) and `events-<n>.jsonl`, one batch per
line: {"pid", "host", "dropped", "events": [[ph, cat, name, ts, dur, role, rank, step, method,
flow, args], ...]}. A line cut short by a crash is skipped, so everything written before it loads.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Iterator


def meta_path(spill_dir: str) -> str:
    return os.path.join(spill_dir, "meta.json")


def read_meta(spill_dir: str) -> dict:
    if not os.path.isdir(spill_dir):
        raise FileNotFoundError(f"spill directory not found: {spill_dir!r}")
    try:
        with open(meta_path(spill_dir)) as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{spill_dir!r} is not an rldbg spill directory (no meta.json)") from None


def iter_batches(spill_dir: str) -> Iterator[dict]:
    files = sorted(glob.glob(os.path.join(spill_dir, "events-*.jsonl")),
                   key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue   # torn last line of a crashed writer


def iter_events(spill_dir: str) -> Iterator[tuple[dict, list]]:
    """(batch meta, event) pairs in arrival order."""
    for batch in iter_batches(spill_dir):
        for ev in batch.get("events", ()):
            yield batch, ev


class SpillWriter:
    """Append-only, one file per ~64 MB so a huge run never rewrites one giant file."""

    ROTATE = 64 * 1024 * 1024

    def __init__(self, spill_dir: str, meta: dict):
        os.makedirs(spill_dir, exist_ok=True)
        self.dir, self.n, self.f = spill_dir, 0, None
        with open(meta_path(spill_dir), "w") as f:
            json.dump(meta, f)
        self._open()

    def _open(self) -> None:
        if self.f:
            self.f.close()
        self.n += 1
        self.f = open(os.path.join(self.dir, f"events-{self.n}.jsonl"), "a", encoding="utf-8")

    def write(self, batch: dict) -> None:
        self.f.write(json.dumps(batch, default=str, separators=(",", ":")) + "\n")
        self.f.flush()   # each batch on disk as it arrives: a crash loses nothing received
        if self.f.tell() > self.ROTATE:
            self._open()

    def close(self) -> None:
        if self.f:
            self.f.close()
            self.f = None
