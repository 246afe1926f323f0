"""How the report reads a loaded trace: which events it can read (rldbg.trace.load.phases, the
one place the rule is written) and how counter samples become per-rank series
(rldbg.trace.report.Trace), on hand-written events with every kind of damage a writer or an
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
