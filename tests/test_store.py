"""The run as a store (rldbg.store): what `rldbg report` accepts and reads, that the report of a
store is the report the JSON re-reading path gave, and the one-line errors for what is no trace.

tests/data/gpu/<trace>.report.txt / .report.json are the reports the JSON re-reading path (before
the store) printed for the recorded GPU traces, saved from that rldbg: a trace imported into a
store must report the same, line for line (the first line names the file given).
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rldbg.store import schema, store_path_for
from rldbg.store.chrome_import import from_chrome
from rldbg.trace import events as ev
from rldbg.trace.export import export_spill
from rldbg.trace.load import load_trace
from rldbg.trace.spill import SpillWriter

DATA = Path(__file__).parent / "data" / "gpu"
GPU_TRACES = ["h200_demo_faults", "h200_llama_small_before_fix", "h200_llama_small_stranger"]
T0 = 1_700_000_000_000_000_000


def _report(path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rldbg", "report", *flags, str(path)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("name", GPU_TRACES)
def test_a_recorded_gpu_trace_reports_as_the_json_path_did_imported_or_from_its_store_file(tmp_path, name):
    want_text = (DATA / f"{name}.report.txt").read_text().splitlines()[1:]
    want_json = json.loads((DATA / f"{name}.report.json").read_text())
    want_json.pop("trace")
    db = tmp_path / f"{name}.rldbg.db"
    from_chrome(str(DATA / f"{name}.json.gz"), str(db)).close()   # imported into a store file
    for path in (DATA / f"{name}.json.gz", db):
        r = _report(path)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[1:] == want_text, path
        got = json.loads(_report(path, "--json").stdout)
        assert got.pop("trace") == str(path)
        assert got == want_json, path


def _spill(tmp_path, steps: int = 6) -> str:
    """A run's spill: a driver call per step fanned out to two actor ranks, memory samples."""
    spill = str(tmp_path / "run.spill")
    w = SpillWriter(spill, {"origin_ns": T0, "job_id": "j"})
    batch = []
    for s in range(steps):
        t = T0 + s * 100_000_000
        batch.append(ev.slice_event("step", f"step {s}", t, 90_000_000, "driver", 0, s, None))
        batch.append(ev.driver_call_event("update_actor", t + 1000, 80_000_000, s, "update_actor", s,
                                          {"group": "actor", "mode": "DP", "world": 2, "t_dispatched": t + 2000}))
        for rank in (0, 1):
            batch.append(ev.slice_event("call", "update_actor", t + 3000, (20 + 40 * rank) * 1_000_000, "actor",
                                        rank, s, "update_actor", s, {"flow": s}))
            batch.append(ev.memory_event(t + 5000, "actor", rank, s, None, {"rss": (100 + s) << 20}))
    w.write({"pid": 1, "host": "h", "dropped": 0, "events": batch})
    w.close()
    return spill


def test_the_report_of_a_perfetto_file_reads_the_store_beside_it(tmp_path):
    out = tmp_path / "trace.json"
    info = export_spill(_spill(tmp_path), str(out))
    assert info["store"] == str(tmp_path / "trace.rldbg.db") == store_path_for(str(out))
    whole = _report(out)
    assert whole.returncode == 0, whole.stderr
    # The file cut to its first lines: its store is what the report reads, so nothing is missing.
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:5]) + "\n")
    cut = _report(out)
    assert cut.returncode == 0 and cut.stdout == whole.stdout and "WARNING" not in cut.stdout
    # The store itself, and the file copied elsewhere without it (imported): the same report.
    assert _report(info["store"]).stdout.splitlines()[1:] == whole.stdout.splitlines()[1:]
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "trace.json").write_text("\n".join(lines) + "\n")
    imported = _report(alone / "trace.json")
    assert imported.returncode == 0 and imported.stdout.splitlines()[1:] == whole.stdout.splitlines()[1:]
    assert "STRAGGLER actor rank 1" in whole.stdout


def test_a_store_beside_a_file_of_another_export_is_not_taken_for_its_store(tmp_path):
    """trace.rldbg.db beside trace.json.gz was written for trace.json.gz; trace.json, a file from
    elsewhere of the same base name, is imported instead."""
    export_spill(_spill(tmp_path), str(tmp_path / "trace.json.gz"))
    other = tmp_path / "trace.json"
    other.write_text(json.dumps([{"ph": "X", "cat": "user", "name": "x", "ts": 1, "dur": 1}]))
    r = _report(other)
    assert r.returncode == 2 and "no rldbg events" in r.stderr


def test_a_damaged_json_keeps_the_tolerant_readers_notes_in_its_store(tmp_path):
    out = tmp_path / "trace.json"
    export_spill(_spill(tmp_path), str(out))
    text = out.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) * 2 // 3])
    _, notes = load_trace(str(cut))
    assert notes and notes[0].startswith("truncated")
    conn = from_chrome(str(cut), str(tmp_path / "cut.rldbg.db"))
    assert schema.get(conn, "notes") == notes
    conn.close()
    r = _report(tmp_path / "cut.rldbg.db")
    assert r.returncode == 3 and f"truncated/damaged ({notes[0]}" in r.stdout


def _one_line_error(path, what: str) -> None:
    r = _report(path)
    assert r.returncode == 2, r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and what in r.stderr and str(path) in r.stderr, r.stderr


def test_what_is_no_trace_nor_store_is_one_line_naming_it(tmp_path):
    _one_line_error(tmp_path / "missing.rldbg.db", "not found")
    _one_line_error(tmp_path, "is a directory")
    png = tmp_path / "picture.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    _one_line_error(png, "not a Chrome JSON trace")
    other = tmp_path / "other.db"   # an SQLite file that is not an rldbg store
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    _one_line_error(other, "is not an rldbg store")
    garbage = tmp_path / "garbage.rldbg.db"   # an SQLite header and then nothing a database holds
    garbage.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    _one_line_error(garbage, "is not an rldbg store")


def test_a_store_cut_short_while_written_is_refused_in_one_line(tmp_path):
    """A store whose writing stopped before its end has no "complete" mark: the report refuses it
    by name rather than report on part of a run as if it were all of it."""
    export_spill(_spill(tmp_path), str(tmp_path / "trace.json"))
    db = tmp_path / "trace.rldbg.db"
    partial = tmp_path / "partial.rldbg.db"
    shutil.copy(db, partial)
    c = sqlite3.connect(partial)
    c.execute("DELETE FROM run WHERE key = 'complete'")
    c.commit()
    c.close()
    _one_line_error(partial, "written only in part")
    # Its trace file beside it is still read (imported) when the store beside it is cut short.
    os.replace(partial, db)
    r = _report(tmp_path / "trace.json")
    assert r.returncode == 0 and "STRAGGLER actor rank 1" in r.stdout, r.stderr
