"""How the report reads a trace file: which events it can read (rldbg.store.chrome_import.phases, the one
place the rule is written) and how counter samples become per-rank series once the file is
imported into a store (rldbg.store.chrome_import → rldbg.trace.report_trace.Trace), on
hand-written events with every kind of damage a writer or an editor leaves."""
from __future__ import annotations

import json

import pytest

from rldbg.store.chrome_import import phases
from trace_of import load_trace
from rldbg.trace.report import Trace, read_trace

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


def _read(tmp_path, events: list) -> Trace:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(events))
    return read_trace(str(path))


def test_counter_samples_become_per_rank_series_in_time_order(tmp_path):
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
    t = _read(tmp_path, events)
    assert t.mem == {("actor", 1, "rss"): ([1000, 2000], [10, 20]), ("actor", 1, "device_used"): ([2000], [5]),
                     ("actor", 0, "rss"): ([3000], [30])}   # (times, values)
    assert t.ledger == {("critic", 0, "params"): ([1500], [7]), ("critic", 0, "grads"): ([1500], [0])}
    assert t.mem_series("actor", 1) == ([2000], [5])   # device memory is preferred over RSS
    assert t.mem_series("actor", 0) == ([3000], [30])


def test_counter_times_beyond_64_bits_are_kept_exact_and_in_order(tmp_path):
    # A trace from elsewhere: times no 64-bit sum holds (the series is sorted without numpy's wrap).
    events = [_meta(2, "actor"),
              {"ph": "X", "pid": 2, "tid": 1, "cat": "call", "name": "update", "ts": "0.000", "dur": "9.000",
               "args": {"role": "actor", "rank": 0}}]
    events += [{"ph": "C", "pid": 2, "name": "rank 0 memory", "ts": ts, "args": {"rss": v}}
               for ts, v in ((1e22, 5), (9.2e15, 6), (-9.2e15, 7), (2.5, 8))]
    assert _read(tmp_path, events).mem == {("actor", 0, "rss"): ([-9_200_000_000_000_000_000, 2500,
                                                                  9_200_000_000_000_000_000, 1e25], [7, 8, 6, 5])}


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
            "ledger": dict(t.ledger), "ranks": t.ranks, "start": t.start, "instants": t.instants,
            "dropped": t.dropped_total, "losses": t.loss_summary()}


def test_a_process_named_after_its_events_names_them_in_every_form_of_the_file(tmp_path):
    """One event per line as the exporter writes them, pretty-printed, or the object form: the
    same store; a file cut short keeps the tolerant reader's note."""
    path = tmp_path / "t.json"
    path.write_text(_lines(PIECED))
    t = read_trace(str(path))
    assert t.mem[("critic", 0, "rss")] and t.transitions[0]["role"] == "critic"
    assert t.notes == ["40 malformed event(s) skipped (missing or bad ph/ts/dur/args)"]
    assert [e["name"] for e in t.instants] == ["rldbg trace losses"]   # not the marks
    assert t.start["clock"]["max_uncertainty_ns"] == 1000
    assert t.dropped_total == 3 and t.loss_summary()["total_lost"] == 3
    for text in (json.dumps(PIECED, indent=1), json.dumps({"traceEvents": PIECED})):
        path.write_text(text)
        again = read_trace(str(path))
        assert _facts(again) == _facts(t) and again.notes == t.notes
    path.write_text(_lines(PIECED)[:-40])
    cut = read_trace(str(path))
    assert cut.notes == load_trace(str(path))[1] and cut.notes[0].startswith("truncated")
