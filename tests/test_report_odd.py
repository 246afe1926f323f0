"""`rldbg report` on traces whose rldbg events carry values rldbg never writes (an edited trace, or
one written by another tool in rldbg's layout): a rank that is text, a method that is a list, a
memory reading that is Infinity, a process id that is a list, a loss record of the wrong shape.
Each such slice or sample is left out and counted in a damage note naming the field; everything
else is reported exactly as if it had never been in the file, by the text, JSON and HTML reports
alike, and nothing fails deep inside an analysis."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rldbg.trace.html_report import render_html
from rldbg.trace.report import analysis, read_trace, render

RLDBG = str(Path(sys.executable).with_name("rldbg"))
STEPS = 8


def _base() -> list[dict]:
    """A small trace laid out as rldbg's exporter lays it out: a driver and two actor ranks, each
    step a driver call fanned out to both ranks, an offload transition per rank, memory and
    ledger counters, the trace's start, loss and drop records. Rank 1 is the slow one."""
    ev = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "driver"}},
          {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "actor"}},
          {"ph": "M", "pid": 2, "tid": 1, "name": "thread_name", "args": {"name": "rank 0", "node_id": "n1",
                                                                          "node_ip": "127.0.0.1", "pid": 20}},
          {"ph": "M", "pid": 2, "tid": 2, "name": "thread_name", "args": {"name": "rank 1", "node_id": "n1",
                                                                          "node_ip": "127.0.0.1", "pid": 21}},
          {"ph": "i", "s": "g", "pid": 1, "tid": 1, "name": "rldbg trace start", "ts": "0.000",
           "args": {"clock": {"aligned": True, "max_uncertainty_ns": 1500, "processes": {}}}},
          {"ph": "i", "s": "g", "pid": 1, "tid": 1, "name": "rldbg trace losses", "ts": "1.000",
           "args": {"total_lost": 2, "by_cause": {"buffer full": 2}, "silent": ["w9"]}},
          {"ph": "C", "pid": 1, "name": "rldbg dropped events", "ts": "1.000", "args": {"total": 2}}]
    for s in range(STEPS):
        t0 = 100_000 * s
        ev.append({"ph": "X", "pid": 1, "tid": 1, "cat": "step", "name": f"step {s}", "ts": f"{t0}.000",
                   "dur": "90000.000", "args": {"role": "driver", "step": s}})
        ev.append({"ph": "X", "pid": 1, "tid": 1, "cat": "driver_call", "name": "actor.update", "ts": f"{t0 + 10}.000",
                   "dur": "80000.000", "args": {"mode": "DP_COMPUTE_PROTO", "step": s, "method": "update",
                                                 "flow": s}})
        for r in (0, 1):
            dur = 20_000 if r == 0 else 60_000   # rank 1 takes 3x as long: a straggler
            ev.append({"ph": "X", "pid": 2, "tid": r + 1, "cat": "call", "name": "update", "ts": f"{t0 + 20}.000",
                       "dur": f"{dur}.000", "args": {"role": "actor", "rank": r, "step": s, "method": "update",
                                                     "flow": s, "mem_before": 100 << 20, "mem_after": 110 << 20}})
            ev.append({"ph": "X", "pid": 2, "tid": r + 1, "cat": "transition", "name": "offload_params",
                       "ts": f"{t0 + dur + 100}.000", "dur": "500.000",
                       "args": {"role": "actor", "rank": r, "step": s, "method": "update", "frees": ["params"],
                                "mem_before": 110 << 20, "mem_after": (60 + 30 * s) << 20}})
            ev.append({"ph": "C", "pid": 2, "name": f"rank {r} memory", "ts": f"{t0 + 5000}.000",
                       "args": {"rss": (100 + s) << 20}})
            ev.append({"ph": "C", "pid": 2, "name": f"rank {r} ledger", "ts": f"{t0 + dur + 700}.000",
                       "args": {"params": 0, "optimizer": 8 << 20}})
    return ev


def _write(path: Path, events: list[dict]) -> str:
    # One event per line, as the exporter writes them (allow_nan: json.loads reads NaN back).
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n")
    return str(path)


def _report(path: str) -> tuple[dict, list[str], str]:
    """(analysis without the file's name, damage notes, HTML page) as `rldbg report` makes them."""
    t = read_trace(path)
    r = analysis(t)
    render(r)
    page = render_html(path, (r, t))
    r.pop("trace")
    return r, t.notes, page


def _find(events: list[dict], cat: str, rank: int, step: int) -> int:
    return next(i for i, e in enumerate(events)
                if e.get("cat") == cat and e["args"].get("rank") == rank and e["args"].get("step") == step)


def test_the_healthy_trace_reports_its_straggler_and_leak(tmp_path):
    r, notes, _ = _report(_write(tmp_path / "t.json", _base()))
    assert notes == []
    assert [(s["role"], s["rank"]) for s in r["stragglers"]] == [("actor", 1)]
    assert {(k["rank"], k["transition"]) for k in r["leaks"]} == {(0, "offload_params"), (1, "offload_params")}
    assert r["clock"]["max_uncertainty_ns"] == 1500


# (cat of the slice spoilt, its field (in args unless "name"), a value rldbg never writes there)
ODD_SLICES = [
    ("call", "name", 5), ("call", "name", None), ("call", "name", ["update"]),
    ("call", "rank", "1"), ("call", "rank", 1.0), ("call", "rank", True), ("call", "rank", None), ("call", "rank", [1]),
    ("call", "step", "3"), ("call", "step", 2.5), ("call", "step", {"n": 3}),
    ("call", "method", 7), ("call", "method", ["update"]),
    ("call", "flow", [3]), ("call", "flow", {"id": 3}), ("call", "flow", 1.5),
    ("call", "mem_before", "100 MiB"), ("call", "mem_before", True), ("call", "mem_after", [1]),
    ("call", "mem_after", float("inf")), ("call", "mem_after", float("nan")), ("call", "mem_after", 10 ** 400),
    ("transition", "frees", "params"), ("transition", "frees", ["params", 1]), ("transition", "frees", {"params": 1}),
    ("transition", "loads", 3), ("transition", "mem_after", "60 MiB"),
    ("driver_call", "rank", "0"), ("driver_call", "flow", [0]),
]


@pytest.mark.parametrize("cat,field,value", ODD_SLICES, ids=lambda v: repr(v)[:20])
def test_a_slice_with_an_odd_field_is_reported_as_if_it_were_not_there(tmp_path, cat, field, value):
    base = _base()
    i = _find(base, cat, rank=0 if cat == "driver_call" else 1, step=3) if cat != "driver_call" else next(
        i for i, e in enumerate(base) if e.get("cat") == "driver_call" and e["args"]["step"] == 3)
    odd = copy.deepcopy(base)
    (odd[i] if field == "name" else odd[i]["args"])[field] = value
    without = base[:i] + base[i + 1:]
    got, notes, page = _report(_write(tmp_path / "odd.json", odd))
    want, want_notes, _ = _report(_write(tmp_path / "without.json", without))
    assert want_notes == []
    assert notes == [f"1 rldbg slice(s) skipped for a field of a type rldbg does not write ({field} 1)"]
    assert got == want
    assert "<svg" in page


def test_odd_slices_are_counted_by_field(tmp_path):
    odd = _base()
    for step, field, value in ((1, "rank", "1"), (4, "rank", None), (5, "flow", [5])):
        odd[_find(odd, "call", rank=1, step=step)]["args"][field] = value
    _, notes, _ = _report(_write(tmp_path / "odd.json", odd))
    assert notes == ["3 rldbg slice(s) skipped for a field of a type rldbg does not write (flow 1, rank 2)"]


@pytest.mark.parametrize("value", ["big", None, [1], {"rss": 1}, True, float("inf"), float("nan"), 10 ** 400])
def test_a_counter_sample_that_is_not_a_number_is_left_out(tmp_path, value):
    base = _base()
    i = next(i for i, e in enumerate(base) if e.get("name") == "rank 1 memory" and e["ts"] == "305000.000")
    odd = copy.deepcopy(base)
    odd[i]["args"]["rss"] = value
    got, notes, page = _report(_write(tmp_path / "odd.json", odd))
    want, _, _ = _report(_write(tmp_path / "without.json", base[:i] + base[i + 1:]))
    assert notes == ["1 counter sample(s) skipped: a value that is not a number"]
    assert got == want
    assert "Memory per rank" in page


def test_a_process_id_that_is_a_list_names_nothing(tmp_path):
    odd = _base()
    odd.insert(0, {"ph": "M", "pid": [9], "name": "process_name", "args": {"name": "ghost"}})
    odd.insert(0, {"ph": "M", "pid": [2], "tid": 1, "name": "thread_name", "args": {"name": "rank 0", "node_id": "x"}})
    odd.append({"ph": "X", "pid": [9], "tid": 1, "cat": "call", "name": "update", "ts": "5.000", "dur": "1.000",
                "args": {"rank": 0, "step": 0, "method": "update"}})   # no role: its process names it
    r, notes, _ = _report(_write(tmp_path / "odd.json", odd))
    assert notes == []
    assert "pid [9]" in r["time"]["roles"] and "ghost" not in r["time"]["roles"]
    assert [(x["role"], x["rank"]) for x in r["ranks"]] == [("actor", 0), ("actor", 1)]


def test_calls_with_and_without_a_method_sort_together(tmp_path):
    odd = _base()
    for s in range(STEPS):   # a second group of calls whose slices name no method
        for r, dur in ((0, 1000), (1, 9000)):
            odd.append({"ph": "X", "pid": 2, "tid": r + 1, "cat": "call", "name": "sync",
                        "ts": f"{100_000 * s + 85_000}.000", "dur": f"{dur}.000",
                        "args": {"role": "actor", "rank": r, "step": s, "flow": 100 + s}})
    r, notes, _ = _report(_write(tmp_path / "odd.json", odd))
    assert notes == []
    assert [(s["method"], s["rank"]) for s in r["stragglers"]] == [(None, 1), ("update", 1)]
    assert [s["method"] for s in r["skew"]] == [None, "update"]


def test_the_cli_reports_an_edited_trace_with_one_warning(tmp_path):
    odd = _base()
    odd[_find(odd, "call", rank=1, step=2)]["args"]["rank"] = "one"
    for e in odd:
        if e.get("name") == "rldbg trace losses":
            e["args"].update(by_cause=["buffer full"], silent="w9")   # a list and a string, not a dict and a list
        if e.get("name") == "rldbg trace start":
            e["args"]["clock"]["max_uncertainty_ns"] = "1.5 ms"
    path = _write(tmp_path / "odd.json", odd)
    out = subprocess.run([RLDBG, "report", path, "--html", str(tmp_path / "odd.html")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 3, out.stderr   # a damaged trace's status (rldbg.commands.report)
    warnings = [line for line in out.stdout.splitlines() if "WARNING" in line]
    assert len(warnings) == 2, out.stdout
    assert "1 rldbg slice(s) skipped for a field of a type rldbg does not write (rank 1)" in warnings[0]
    assert "the trace records 2 events lost" in warnings[1]
    assert "STRAGGLER actor rank 1" in out.stdout and "clocks aligned" not in out.stdout
    assert out.stderr == "" and (tmp_path / "odd.html").stat().st_size > 0


def test_the_html_page_goes_into_a_new_folder_and_an_impossible_one_fails_before_any_report(tmp_path):
    path = _write(tmp_path / "base.json", _base())
    page = tmp_path / "new" / "folder" / "r.html"
    out = subprocess.run([RLDBG, "report", path, "--html", str(page)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and page.stat().st_size > 0, out.stderr
    (tmp_path / "a_file").write_text("")
    bad = tmp_path / "a_file" / "r.html"   # under a file: no folder can be made there
    out = subprocess.run([RLDBG, "report", path, "--html", str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert out.stderr.strip() == f"rldbg report: cannot write {bad}: a file is where a folder would be", out.stderr
    # A folder given as the page fails first too; a report that fails leaves no folder made for its page.
    out = subprocess.run([RLDBG, "report", path, "--html", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert out.stderr.strip() == (f"rldbg report: cannot write {tmp_path}: it is a folder; name the page, "
                                  f"e.g. {tmp_path / 'report.html'}"), out.stderr
    empty = _write(tmp_path / "empty.json", [])
    out = subprocess.run([RLDBG, "report", empty, "--html", str(tmp_path / "gone" / "sub" / "r.html")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and not (tmp_path / "gone").exists(), out.stderr
