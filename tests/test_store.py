"""The run as a store (rldbg.store): what `rldbg report` accepts and reads, that the report of a
store is the report the JSON re-reading path gave, and the one-line errors for what is no trace.

tests/data/gpu/<trace>.report.txt / .report.json are the reports the JSON re-reading path (before
the store) printed for the recorded GPU traces, saved from that rldbg (its JSON since with the
other controllers' idle times, "others": [] for these one-controller runs, as that path gives
it): a trace imported into a store must report the same, line for line (the first line names
the file given).
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
from trace_of import load_trace
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
        assert got.pop("trace") == str(path) and got.pop("store") is None   # no store beside: imported, or itself
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
    assert whole.stdout.splitlines()[0] == f"rldbg report: {out} (read from its store, trace.rldbg.db)"
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
    text = tmp_path / "text.rldbg.db"   # no SQLite header: read as a trace, and what its name promised said too
    text.write_text("x")
    _one_line_error(text, "not a Chrome JSON trace (expected an array of events or an object with traceEvents); "
                          "nor an rldbg store (no SQLite header)")
    fake = tmp_path / "fake.json.gz"
    fake.write_text("garbage")
    _one_line_error(fake, "; nor gzip data, though named .gz")


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


def _controllers_spill(tmp_path, steps: int = 4) -> str:
    """Two controllers in one job (a trainer-like process, pid 2, calling the actor group; an
    evaluation process, pid 3, calling the critic group), each marking its own steps and making two
    calls a step, beside the driver (pid 1) that makes none. The evaluator's first batch holds a
    driver-role instant from before its first call, which must move to its track all the same."""
    spill = str(tmp_path / "controllers.spill")
    w = SpillWriter(spill, {"origin_ns": T0, "job_id": "j"})
    w.write({"pid": 1, "host": "h", "dropped": 0, "events": [ev.instant_event("user", "hello", T0, "driver", 0, None, None)]})
    w.write({"pid": 3, "host": "h", "dropped": 0,
             "events": [ev.instant_event("user", "evaluator up", T0 + 1000, "driver", 0, None, None)]})
    for pid, group, method, role, lag, flow0 in ((2, "actor", "update_actor", "actor", 0, 0),
                                                  (3, "critic", "compute_values", "critic", 5_000_000, 1000)):
        ctl, work = [], []
        for s in range(steps):
            t = T0 + s * 100_000_000 + lag
            ctl.append(ev.slice_event("step", f"step {s}", t, 90_000_000, "driver", 0, s, None))
            for k, at in enumerate((1_000_000, 50_000_000)):
                flow = flow0 + 2 * s + k
                ctl.append(ev.driver_call_event(method, t + at, 20_000_000, s, method, flow,
                                                {"group": group, "mode": "DP", "world": 2, "t_dispatched": t + at + 1000}))
                work += [ev.slice_event("call", method, t + at + 2000, 10_000_000, role, rank, s, method, flow)
                         for rank in (0, 1)]
        w.write({"pid": pid, "host": "h", "dropped": 0, "events": ctl})
        w.write({"pid": pid + 10, "host": "h", "dropped": 0, "events": work})
    w.close()
    return spill


def test_several_controllers_get_a_track_each_in_the_store_the_export_and_the_report(tmp_path):
    from rldbg.trace.report import analyse, render
    out = tmp_path / "trace.json"
    info = export_spill(_controllers_spill(tmp_path), str(out))
    conn = schema.open_store(info["store"])
    procs = {pid: proc for proc, pid in conn.execute("SELECT id, pid FROM processes")}
    # The first process to call or mark a step keeps track 0; the other's driver-role events, its
    # instant from before its first call too, are on track 1; the driver's own stay on track 0.
    assert conn.execute("SELECT role, rank, proc FROM tracks WHERE role = 'driver' ORDER BY rank").fetchall() == [
        ("driver", 0, procs[2]), ("driver", 1, procs[3])]
    assert {p: {r for (r,) in conn.execute("SELECT DISTINCT rank FROM event_rows WHERE role = 'driver' AND proc = ?",
                                           (procs[p],))} for p in (1, 2, 3)} == {1: {0}, 2: {0}, 3: {1}}
    conn.close()
    events = json.loads(out.read_text())
    threads = {e["tid"]: e["args"] for e in events if e.get("name") == "thread_name" and e["pid"] == 1}
    assert {tid: (a["name"], a["pid"]) for tid, a in threads.items()} == {1: ("driver", 2), 2: ("controller pid 3", 3)}
    calls = [e for e in events if e.get("cat") == "driver_call" and e["name"] in ("update_actor", "compute_values")]
    assert {(e["name"], e["tid"], e["args"].get("rank")) for e in calls} == {
        ("update_actor", 1, None), ("compute_values", 2, 1)}
    assert {(e["name"], e["tid"]) for e in events if e.get("cat") == "user"} == {("hello", 1), ("evaluator up", 2)}
    # The report, from the store and from the file imported elsewhere, alike.
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out, alone / "trace.json")
    for path in (out, alone / "trace.json"):
        r = analyse(str(path))
        assert [(x["rank"], x["pid"]) for x in r["ranks"] if x["role"] == "driver"] == [(0, 2), (1, 3)], path
        c = r["controller"]
        # Each one's gaps between its own calls, never from one controller's call to the other's.
        assert c["largest_gaps"] and all((g["after"], g["before"]) == ("update_actor",) * 2
                                         for g in c["largest_gaps"]), c
        [o] = c["others"]
        assert (o["track"], o["calls"]) == (1, 8) and all(
            (g["after"], g["before"]) == ("compute_values",) * 2 for g in o["largest_gaps"]), o
        assert r["time"]["steps"] == 4   # the job's steps are the first controller's
        assert "controller pid 3 (track 1, 8 call(s)) idle:" in render(r)
