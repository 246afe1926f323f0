"""The binary spill (rldbg.trace.spill): what a shipper packs and the collector appends reads back
exactly, across rotation, and the exporter writes the same Chrome JSON
from it that a dict-by-dict json.dumps of each event would."""
from __future__ import annotations

import json

from rldbg.trace import events as ev
from rldbg.trace.collector import Collector
from rldbg.trace.export import export_spill
from rldbg.trace.spill import SpillWriter, decode_events, encode_events, iter_records
from trace_of import iter_batches


def _events(n, rank=0):
    out = []
    for i in range(n):
        out.append(ev.slice_event("call", "update_actor", 10_000 + i * 1000, 500, "actor", rank, i, "update_actor",
                                  i, {"group": "actor", "é": [1, 2.5, None]}))
        out.append(ev.instant_event("user", "mark \"q\"", 10_100 + i * 1000, "actor", rank, None, None, {}))
        out.append(ev.memory_event(10_200 + i * 1000, "actor", rank, i, "m", {"rss": 1 << 40, "f": 0.25}))
    return out


def test_round_trip_through_the_collector_with_rotation(tmp_path, monkeypatch):
    spill = str(tmp_path / "t.spill")
    monkeypatch.setattr(SpillWriter, "ROTATE", 2_000)   # a few batches per file
    c = Collector(spill, {"origin_ns": 1, "job_id": "j"})
    sent = []
    for b in range(6):
        evs = _events(10, rank=b % 2)
        sent.append(evs)
        meta = {"pid": 7, "host": "h", "dropped": 0, "lost": {}, "node_id": "n", "node_ip": "127.0.0.1",
                "clock_offset_ns": -5, "clock_rtt_ns": 9, "n": len(evs)}
        assert c.ingest(meta, encode_events(evs)) == len(evs)   # as a shipper sends it: packed bytes
    assert c.events_since(0)[1] == [list(e) for evs in sent for e in evs]   # the live view decodes the same
    assert c.ingest(dict(meta, n=0), b"") == 0   # a heartbeat with no news: nothing written
    extra = [list(e) for e in _events(3)]
    c.ingest({"pid": 8, "host": "h2", "n": len(extra)}, encode_events(extra))   # a second process
    c.close()
    files = sorted((tmp_path / "t.spill").glob("events-*.rlb"))
    assert len(files) > 3
    batches = list(iter_batches(spill))
    got = [b["events"] for b in batches if b.get("pid") == 7]
    assert got == [[list(e) for e in evs] for evs in sent]
    assert all(b["node_ip"] == "127.0.0.1" and b["clock_offset_ns"] == -5 and "n" not in b
               for b in batches if b.get("pid") == 7)
    assert [b["events"] for b in batches if b.get("pid") == 8] == [extra]


def test_once_stop_asked_a_batch_that_leaves_nothing_behind_is_kept_and_answered_closed(tmp_path):
    """stop() sets closing_ns: a sender whose batch empties its buffer hears "closed" (-1) in that
    answer, its events kept; one that still has events pending is answered as usual, so it ships
    them; after close(), batches are refused and not written."""
    spill = str(tmp_path / "t.spill")
    c = Collector(spill, {"origin_ns": 1, "job_id": "j"})
    first, rest, late = _events(2), _events(3), _events(1)
    c.closing_ns = 5
    assert c.ingest({"pid": 7, "host": "h", "n": len(first), "pending": len(rest)}, encode_events(first)) == len(first)
    assert c.ingest({"pid": 7, "host": "h", "n": len(rest), "pending": 0}, encode_events(rest)) == -1
    assert c.ingest({"pid": 8, "host": "h", "pending": 0}, b"") == -1   # an idle process's heartbeat
    assert c.ingest({"pid": 9, "host": "h", "final": True}, b"") == 0    # a process that exited
    assert c.all_told_closed()
    c.close()
    assert c.ingest({"pid": 7, "host": "h", "n": len(late), "pending": 0}, encode_events(late)) == -1
    got = [b["events"] for b in iter_batches(spill) if b.get("pid") == 7]
    assert got == [[list(e) for e in first], [list(e) for e in rest]]


def test_types_json_cannot_pack_travel_as_text(tmp_path):
    class Odd:
        def __str__(self):
            return "odd!"

    evs = [ev.instant_event("user", "x", 1, "driver", 0, None, None, {"big": 1 << 70, "odd": Odd()})]
    back = decode_events(encode_events(evs))
    assert back[0][10] == {"big": str(1 << 70), "odd": "odd!"}
    evs = [ev.instant_event("user", "x", 1, "driver", 0, None, None, {"odd": Odd(), "n": 3})]
    assert decode_events(encode_events(evs))[0][10] == {"odd": "odd!", "n": 3}


def test_export_writes_what_json_dumps_of_each_event_dict_would(tmp_path):
    spill = str(tmp_path / "s.spill")
    w = SpillWriter(spill, {"origin_ns": 5_000, "job_id": "j"})
    evs = _events(5)
    # args naming a key the exporter also sets: theirs win (the dict path)
    evs.append(ev.slice_event("user", "own", 20_000, 7, "actor", 0, 3, "m", None, {"step": "mine", "z": 1}))
    evs.append(ev.instant_event("user", "own", 20_001, "actor", 0, 3, None, {"rank": 99}))
    w.write({"pid": 1, "host": "h", "node_id": "nodeabcdef", "node_ip": "10.0.0.1", "events": evs})
    w.close()
    out = tmp_path / "t.json"
    info = export_spill(spill, str(out))
    assert info["events"] == len(evs)
    got = json.loads(out.read_text())
    xs = [e for e in got if e.get("ph") == "X" and e.get("cat") == "call"]
    assert xs[0] == {"ph": "X", "pid": 2, "tid": 1, "cat": "call", "name": "update_actor", "ts": "5.000",
                     "dur": "0.500", "args": {"group": "actor", "é": [1, 2.5, None], "role": "actor", "rank": 0,
                                              "step": 0, "method": "update_actor", "node": "nodeabcd",
                                              "ip": "10.0.0.1"},
                     # flow 0's bind id: flow x 2 tracks (driver 0, actor 0) + actor 0's place (1) + 1
                     "bind_id": 2, "flow_in": True, "flow_out": True}
    mark = next(e for e in got if e.get("name") == 'mark "q"')
    assert mark == {"ph": "i", "s": "t", "pid": 2, "tid": 1, "cat": "user", "name": 'mark "q"', "ts": "5.100",
                    "args": {"role": "actor", "rank": 0, "step": None}}
    mem = next(e for e in got if e.get("ph") == "C" and e["name"] == "rank 0 memory")
    assert mem == {"ph": "C", "pid": 2, "name": "rank 0 memory", "ts": "5.200", "args": {"rss": 1 << 40, "f": 0.25}}
    own = [e for e in got if e.get("name") == "own"]
    assert own[0]["args"] == {"step": "mine", "z": 1, "role": "actor", "rank": 0, "method": "m"}
    assert own[1]["args"] == {"rank": 0, "role": "actor", "step": 3}
    assert len(list(iter_records(spill))) == 1


def test_args_are_written_as_the_stdlib_encoder_writes_them_whichever_encoder_runs():
    """chrome_text.args_json takes orjson where it writes the same bytes and the stdlib's encoder
    elsewhere: the text is always json.dumps's (compact, non-ASCII kept), never a near miss
    such as null for NaN, 1e-5 without its exponent, or an error for an int key."""
    import math
    import random

    from rldbg.trace.chrome_text import args_json
    stdlib = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
    fixed = [{"group": "actor"}, {"rss": 1 << 30}, {"f": 0.25, "g": 1e16, "h": 1e-05, "i": 9.7e-05, "j": 3e-07},
             {"nan": math.nan, "inf": -math.inf}, {"step": None, "ok": True}, {1: "int key"},
             {"big": 1 << 70}, {"s": "\ud800 lone"}, {"b": b"raw"}, {"t": (1, "a", [2.5, {"x": None}])},
             {"s": "é \u2028 \x00\x1f\x7f \"q\" \\ \t\n"}, {"word": "size-e-3 .0000"}, {}]
    rng = random.Random(0)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30) for _ in range(3000)]
    values += [round(rng.uniform(0, 1000), rng.randint(0, 8)) for _ in range(3000)]
    values += [rng.randint(-(1 << 63), (1 << 64) - 1) for _ in range(1000)]
    for args in fixed + [{"v": v, "w": [v]} for v in values]:
        assert args_json(args) == stdlib(args), args
