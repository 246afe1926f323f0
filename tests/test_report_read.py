"""How the report reads a loaded trace: which events it can read (rldbg.trace.load.phases, the
one place the rule is written) and how counter samples become per-rank series
(rldbg.trace.report_trace.Trace), on hand-written events with every kind of damage a writer or an
editor leaves."""
from __future__ import annotations

import json

import pytest

from rldbg.trace.load import load_trace, phases
from rldbg.trace.report import Trace

GOOD = [
    {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "actor"}},   # no time needed
    {"ph": "X", "ts": "1.000", "dur": "2.500", "name": "a"},
    {"ph": "X", "ts": 3, "name": "no dur"},                                       # dur defaults to 0
    {"ph": "C", "ts": 4.5, "args": {"rss": 1}},
    {"ph": "i", "ts": "5.000", "args": None},
    {"ph": "Z", "anything": 1},                                                   # an unknown phase needs no time
]
BAD = [
    ["ph", "X"], "X", 7, None,                          # not an object
    {"ts": "1.000"},                                    # no ph
    {"ph": 1, "ts": "1.000"},                           # ph not a string
    {"ph": "X", "dur": 1},                              # no ts where the phase has one
    {"ph": "C", "ts": "soon"},                          # ts not a number's text
    {"ph": "i", "ts": [1]},                             # ts not a number
    {"ph": "X", "ts": 1, "dur": "long"},                # dur not a number
    {"ph": "X", "ts": 10 ** 400},                       # beyond a float (json.loads gives such ints)
    {"ph": "X", "ts": 1, "args": [1, 2]},               # args not an object
    {"ph": "X", "ts": float("nan")},                    # json.loads reads NaN and Infinity: no time
    {"ph": "X", "ts": 1, "dur": float("inf")},
    {"ph": "C", "ts": "-Infinity"},
]


def test_phases_keeps_exactly_the_readable_events_in_order():
    mixed = [e for pair in zip(GOOD, BAD) for e in pair] + BAD[len(GOOD):]
    by_ph, bad = phases(mixed)
    assert bad == len(BAD)
    assert by_ph == {"M": [GOOD[0]], "X": [GOOD[1], GOOD[2]], "C": [GOOD[3]], "i": [GOOD[4]], "Z": [GOOD[5]]}
    assert list(by_ph) == ["M", "X", "C", "i", "Z"]   # first-seen order


@pytest.mark.parametrize("event", GOOD + BAD, ids=lambda e: repr(e)[:40])
def test_each_event_alone_is_judged_the_same(event):
    assert phases([event])[1] == (0 if event in GOOD else 1)


def test_a_damaged_trace_keeps_its_readable_events_in_file_order(tmp_path):
    events = [GOOD[1], GOOD[3], BAD[5], GOOD[2], GOOD[0], BAD[4], GOOD[4]]   # two X around a C
    path = tmp_path / "t.json"
    path.write_text(json.dumps(events))
    got, notes = load_trace(str(path))
    assert got == [GOOD[1], GOOD[3], GOOD[2], GOOD[0], GOOD[4]]
    assert notes == ["2 malformed event(s) skipped (missing or bad ph/ts/dur/args)"]


def _meta(pid, role):
    return {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": role}}


def test_counter_samples_become_per_rank_series_in_time_order():
    events = [
        _meta(2, "actor"), _meta(3, "critic"),
        {"ph": "X", "pid": 2, "tid": 1, "cat": "call", "name": "update", "ts": "0.000", "dur": "9.000",
         "args": {"role": "actor", "rank": 0}},
        {"ph": "C", "pid": 2, "name": "rank 1 memory", "ts": "2.000", "args": {"rss": 20, "device_used": 5}},
        {"ph": "C", "pid": 2, "name": "rank 1 memory", "ts": "1.000", "args": {"rss": 10}},
        {"ph": "C", "pid": 3, "name": "rank 0 ledger", "ts": "1.500", "args": {"params": 7, "grads": 0}},
        {"ph": "C", "pid": 2, "name": "rank 0 memory", "ts": 3, "args": {"rss": 30}},      # ts as a number
        {"ph": "C", "pid": 2, "name": "rank 1 ledger", "ts": "4.000", "args": {}},         # nothing sampled
        {"ph": "C", "pid": 9, "name": "rank 0 memory", "ts": "5.000", "args": {"rss": 1}},  # no such process
        {"ph": "C", "pid": 2, "name": "rldbg dropped events", "ts": "0.000", "args": {"total": 0}},
        {"ph": "C", "pid": 2, "name": ["rank 0 memory"], "ts": "6.000", "args": {"rss": 2}},  # a name not a string
    ]
    t = Trace(events)
    assert dict(t.mem) == {("actor", 1, "rss"): [(1000, 10), (2000, 20)], ("actor", 1, "device_used"): [(2000, 5)],
                           ("actor", 0, "rss"): [(3000, 30)]}
    assert dict(t.ledger) == {("critic", 0, "params"): [(1500, 7)], ("critic", 0, "grads"): [(1500, 0)]}
    assert t.mem_series("actor", 1) == [(2000, 5)]   # device memory is preferred over RSS
    assert t.mem_series("actor", 0) == [(3000, 30)]


# A trace as rldbg's exporter lays it out (one event per line), with what a reader taking it a
# piece at a time could get wrong: a process named only after its counters and slices, a slice
# whose role comes from its process, counters of every kind, malformed events, the loss records.
PIECED = [
    {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "actor"}},
    {"ph": "C", "pid": 1, "name": "rldbg dropped events", "ts": "0.000", "args": {"total": 1}},   # not the last
    {"ph": "i", "s": "g", "pid": 1, "tid": 1, "name": "rldbg trace start", "ts": "0.000",
     "args": {"clock": {"aligned": True, "max_uncertainty_ns": 1000, "processes": {}}}},
    *[e for n in range(40) for e in (
        {"ph": "X", "pid": 2, "tid": 1 + n % 2, "cat": "call", "name": "update", "ts": f"{10 * n}.000",
         "dur": "5.500", "args": {"role": "actor", "rank": n % 2, "step": n // 2, "method": "update", "flow": n // 2}},
        {"ph": "X", "pid": 3, "tid": 1, "cat": "transition", "name": "offload", "ts": f"{10 * n + 1}.250",
         "dur": "1.000", "args": {"rank": 0, "step": n // 2, "frees": ["params"], "mem_after": 100 + n}},
        {"ph": "C", "pid": 3, "name": "rank 0 memory", "ts": f"{10 * n + 2}.000", "args": {"rss": 1000 - n}},
        {"ph": "C", "pid": 3, "name": "rank 0 ledger", "ts": f"{10 * n + 2}.500", "args": {"params": n}},
        {"ph": "C", "pid": 2, "name": f"rank {n % 2} memory", "ts": f"{10 * n + 3}.000",
         "args": {"rss": n, "device_used": 2 * n}},
        {"ph": "X", "pid": 2, "tid": 1, "cat": "user", "name": "forward", "ts": f"{10 * n}.100", "dur": "1"},
        {"ph": "i", "s": "t", "pid": 2, "tid": 1, "name": "mark", "ts": f"{10 * n + 4}.000"},
        {"ph": "X", "ts": "soon", "name": "malformed"})],
    {"ph": "X", "pid": 1, "tid": 1, "cat": "step", "name": "step 0", "ts": "0.000", "dur": "400.000",
     "args": {"role": "driver", "step": 0}},
    {"ph": "M", "pid": 3, "name": "process_name", "args": {"name": "critic"}},   # after its events
    {"ph": "i", "s": "t", "pid": 1, "tid": 1, "name": "rldbg trace losses", "ts": "400.000",
     "args": {"total_lost": 3, "by_cause": {"buffer full": 3}}},
    {"ph": "C", "pid": 1, "name": "rldbg dropped events", "ts": "0.000", "args": {"total": 3}},
]


def _lines(events) -> str:
    return "[\n" + ",\n".join(json.dumps(e, separators=(",", ":")) for e in events) + "\n]\n"


def _facts(t: Trace) -> dict:
    return {"calls": t.calls, "transitions": t.transitions, "steps": t.steps, "mem": dict(t.mem),
            "ledger": dict(t.ledger), "meta": t.meta, "instants": t.instants, "dropped": t.dropped_total,
            "losses": t.loss_summary()}


def _whole_read_refused(monkeypatch):
    """The whole-file path made to fail, to show a read did not fall back to it."""
    from rldbg.trace import load_pieces as load

    def refuse(*a, **k):
        raise AssertionError("read whole")
    monkeypatch.setattr(load, "_load", refuse)


@pytest.mark.parametrize("piece", [1, 150, 1 << 18])   # a piece per line, a few lines, all in one
def test_a_trace_read_a_piece_at_a_time_is_the_trace_read_whole(tmp_path, monkeypatch, piece):
    from rldbg.trace import load_pieces as load
    from rldbg.trace.report import read_trace
    path = tmp_path / "t.json"
    path.write_text(_lines(PIECED))
    whole = Trace(PIECED)   # all events in one piece: every process named before any sample is placed
    assert whole.mem[("critic", 0, "rss")] and whole.transitions[0]["role"] == "critic"
    monkeypatch.setattr(load, "_PIECE", piece)
    _whole_read_refused(monkeypatch)
    t = read_trace(str(path))
    assert _facts(t) == _facts(whole)
    assert t.notes == ["40 malformed event(s) skipped (missing or bad ph/ts/dur/args)"]
    assert [e["name"] for e in t.instants] == ["rldbg trace start", "rldbg trace losses"]   # not the marks
    assert t.dropped_total == 3 and t.loss_summary()["total_lost"] == 3


def test_a_trace_not_one_event_per_line_is_read_whole_the_same(tmp_path, monkeypatch):
    """Pretty-printed: a piece cut inside an event does not parse, and the whole file is read instead."""
    from rldbg.trace import load_pieces as load
    from rldbg.trace.report import read_trace
    path = tmp_path / "t.json"
    path.write_text(json.dumps(PIECED, indent=1))
    monkeypatch.setattr(load, "_PIECE", 150)
    t = read_trace(str(path))
    assert _facts(t) == _facts(Trace(PIECED))
    assert t.notes == ["40 malformed event(s) skipped (missing or bad ph/ts/dur/args)"]
    # and the object form, and a file cut short, the same way as load_trace() reads them
    path.write_text(json.dumps({"traceEvents": PIECED}))
    assert _facts(read_trace(str(path))) == _facts(Trace(PIECED))
    path.write_text(_lines(PIECED)[:-40])
    t = read_trace(str(path))
    assert t.notes == load_trace(str(path))[1] and t.notes[0].startswith("truncated")


def _side_by_side(monkeypatch):
    """Reads in two processes from here on however small the trace; returns the forks counted."""
    import os as _os

    from rldbg.trace import load_pieces
    monkeypatch.setattr(load_pieces, "_PIECE", 100)
    monkeypatch.setattr(load_pieces, "_SIDE_BY_SIDE", 0)
    forks, fork = [], _os.fork

    def counted():
        pid = fork()
        if pid:
            forks.append(pid)
        return pid
    monkeypatch.setattr(_os, "fork", counted)
    return forks


def test_the_second_half_read_by_a_forked_process_adds_up_to_the_whole(tmp_path, monkeypatch):
    from rldbg.trace.report import read_trace
    path = tmp_path / "t.json"
    path.write_text(_lines(PIECED))
    forks = _side_by_side(monkeypatch)
    _whole_read_refused(monkeypatch)
    t = read_trace(str(path), jobs=2)
    assert len(forks) == 1
    assert _facts(t) == _facts(Trace(PIECED))
    assert t.notes == ["40 malformed event(s) skipped (missing or bad ph/ts/dur/args)"]   # both halves' counted


def _helper_dies(monkeypatch):
    """A forked helper's pickling fails from here on: it exits without answering."""
    import pickle

    from rldbg.trace import forked

    class Dying:
        loads = staticmethod(pickle.loads)
        HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL

        @staticmethod
        def dumps(*a, **k):
            raise MemoryError
    monkeypatch.setattr(forked, "pickle", Dying)


def test_a_helper_that_dies_leaves_its_half_to_the_reader(tmp_path, monkeypatch):
    from rldbg.trace.report import read_trace
    path = tmp_path / "t.json"
    path.write_text(_lines(PIECED))
    forks = _side_by_side(monkeypatch)
    _whole_read_refused(monkeypatch)

    _helper_dies(monkeypatch)
    t = read_trace(str(path), jobs=2)
    assert len(forks) == 1 and _facts(t) == _facts(Trace(PIECED))


def test_a_second_half_not_in_lines_sends_the_whole_file_to_the_tolerant_reader(tmp_path, monkeypatch):
    from rldbg.trace.report import read_trace
    text = _lines(PIECED)
    cut = len(text) * 3 // 4
    cut = text.index("\n", cut)
    path = tmp_path / "t.json"   # the last quarter pretty-printed: a piece there does not parse
    path.write_text(text[:cut] + "\n" + json.dumps(json.loads("[" + text[cut + 1:].rstrip()[:-1].rstrip().rstrip(",") + "]"),
                                                   indent=1)[1:-1] + "\n]\n")
    forks = _side_by_side(monkeypatch)
    t = read_trace(str(path), jobs=2)
    assert len(forks) == 1 and _facts(t) == _facts(Trace(PIECED))


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def test_ctrl_c_while_reading_side_by_side_leaves_no_process_behind(tmp_path):
    """`rldbg report` on a big trace with two cores: its helper is forked; a SIGINT to the
    report ends both, and the report exits 130."""
    import os
    import signal
    import subprocess
    import sys
    import time
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: the report reads in one process")
    path = tmp_path / "big.json"
    body = _lines(PIECED)[2:-3]   # the events' lines, without the brackets
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join([body] * 4000) + "\n]\n")   # ~60 MB: over a second of reading
    p = subprocess.Popen([sys.executable, "-m", "rldbg", "report", str(path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, helper = time.monotonic() + 30, []
        while not helper and p.poll() is None and time.monotonic() < deadline:
            helper = _children(p.pid)
            time.sleep(0.01)
        assert helper, f"no helper was forked (rc {p.poll()})"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 130, (p.returncode, err[-500:])
        # Gone when the report is, not some time later: the report ended it and waited for it.
        assert not os.path.exists(f"/proc/{helper[0]}"), "the helper outlived the report"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_the_memory_peaks_worked_out_by_a_forked_helper_are_the_same(monkeypatch):
    from rldbg.trace import report
    t = Trace(PIECED)
    t.path = "t.json"
    alone = report.analysis(t)
    assert alone["memory_peaks"]   # there is something to work out
    forks = _side_by_side(monkeypatch)
    monkeypatch.setattr(report, "PEAKS_APART", 0)
    assert report.analysis(t, jobs=2) == alone and len(forks) == 1

    _helper_dies(monkeypatch)   # the peaks are then worked out here
    assert report.analysis(t, jobs=2) == alone and len(forks) == 2


def test_a_forked_helper_answers_raises_or_is_ended_and_waited_for():
    import os
    import time

    from rldbg.trace.forked import Forked
    with Forked(lambda: {"a": [1, 2]}) as h:
        assert h.result() == {"a": [1, 2]}
    with Forked(lambda: 1 / 0) as h:
        with pytest.raises(ZeroDivisionError):
            h.result()
    t0 = time.monotonic()
    with Forked(lambda: time.sleep(60)) as h:   # left without its answer: killed, not waited out
        pid = h.pid
    assert time.monotonic() - t0 < 30 and h.pid == 0
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)   # already reaped
