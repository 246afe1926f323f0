"""The exporter's text for every kind of event and args a spill can hold (every JSON type, the
escapes JSON writes, ints to the ends of 64 bits, args repeating the layout's keys, falsy and
non-map args, steps and methods of other types, unknown phases, flows that are not rldbg's),
for damaged batches of every kind, and the file it writes whichever way it reads the spill: pass
1's batches kept or read again, in one process or side by side, through the API or the CLI."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rldbg.trace import events as ev
from rldbg.trace import export
from rldbg.trace.export import export_spill
from rldbg.trace.spill import SpillWriter, encode_events

RLDBG = str(Path(sys.executable).with_name("rldbg"))
T0 = 1_000_000_000
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

# Args a slice or counter may carry: every JSON type, the escapes json writes, floats as repr()
# writes them (exponents, NaN, -0.0), ints to the ends of 64 bits.
ODD_ARGS = [
    {"f": 0.1, "e": 1e-05, "big": 1e16, "neg": -0.0, "nan": math.nan, "inf": math.inf, "ninf": -math.inf},
    {"i": -(1 << 63), "u": (1 << 64) - 1, "z": 0, "t": True, "n": None},
    {"s": 'q"b\\n\n\t\r\b\f\x01\x1f\x7f é中😀\u2028', "k\"ey\n": "v"},
    {"nested": {"a": [1, [2, {"b": None}], "x"], "m": {}}, "l": [], "tup": (1, 2)},
    {f"k{i}": i for i in range(17)},
]
# Args JSON has no form for as they are, and args that are not a map.
OTHER_ARGS = [
    {"raw": b"\x00bytes"},                 # bytes: json's default=str
    {1: "int key"},                        # a non-string key
    [1, "two"],                            # not a map: kept whole under "value"
    "a string",
]


def _events(t: int) -> list:
    """A rank's batch reaching every branch of the formatter."""
    evs = []
    for k, a in enumerate(ODD_ARGS):
        evs.append(ev.slice_event("user", f"odd {k}", t + k, 1_500 + k, "actor", 1, 3, "update_actor", None, a))
        evs.append(ev.counter_event("user", f"c{k}", t + k, "actor", 1, 3, None, a))
        evs.append(ev.instant_event("user", f"i{k}", t + k, "actor", 1, 3, None, a))
    for a in OTHER_ARGS:
        evs.append(ev.slice_event("user", "other", t, 10, "actor", 1, 3, "m", None, a))
    # Falsy args: the layout's args alone.
    for a in (None, {}, (), "", 0, 0.0, False):
        evs.append(ev.slice_event("user", "falsy", t, 7, "actor", 1, None, None, None, a))
        evs.append(ev.instant_event("user", "falsy", t, "actor", 1, None, None, a))
    # Args repeating layout keys: a slice's own win; an instant's lose.
    evs.append(ev.transition_event("offload", t, 20, "actor", 1, 3, "update_actor",
                                   {"role": "mine", "rank": 9, "method": "other", "frees": ("optimizer",), "x": 1}))
    evs.append(ev.slice_event("user", "has step", t, 20, "actor", 1, 3, "m", None, {"step": "mine"}))
    evs.append(ev.instant_event("user", "step start", t, "actor", 1, 4, None, {"step": 99}))
    # Steps and methods of other types; a name needing escapes; unknown and empty phases (not written).
    evs.append(ev.slice_event("user", 'n"ame\n', t, 1, "actor", 1, "warmup", None, None, {"a": 1}))
    evs.append(ev.slice_event("user", "float step", t, 1, "actor", 1, 2.5, 7, None, None))
    evs.append(ev.instant_event("user", "mark", t, "actor", 1, "s", None, None))
    evs.append(("Z", "user", "unknown", t, 0, "actor", 1, None, None, None, None))
    evs.append(("", "user", "empty ph", t, 0, "actor", 1, None, None, None, None))
    # Non-map args on a counter (its JSON as is) and times before the origin (floor division).
    evs.append(ev.counter_event("user", "scalar", t, "actor", 1, 3, None, 5))
    evs.append(ev.slice_event("user", "before origin", T0 - 1_234_567, 999, "actor", 1, 3, None, None, None))
    evs.append(ev.slice_event("user", "negative dur", t, -1, "actor", 1, 3, None, None, None))
    return evs


def _write(tmp_path, name: str = "t.spill") -> str:
    """A spill of two ranks and the driver, with calls joined by flows."""
    spill = str(tmp_path / name)
    w = SpillWriter(spill, {"origin_ns": T0, "job_id": "j"})
    t = T0 + 5_000_000
    for step in range(4):
        for rank in range(2):
            evs = [ev.slice_event("call", "update_actor", t + rank, 9_000, "actor", rank, step, "update_actor",
                                  step + 1, {"role": "actor", "rank": rank, "step": step, "flow": step + 1}),
                   ev.slice_event("call", "update_actor", t + rank, 9_000, "actor", rank, step, "update_actor",
                                  None, {"group": "actor"}),   # a call slice without a flow: no bind id
                   ev.slice_event("call", "odd flow", t, 9, "actor", rank, step, "m", 1.5, None),   # not an int: no arrow
                   ev.memory_event(t + 5, "actor", rank, step, "update_actor", {"rss": 1 << 30, "device_used": 0.5})]
            if step == 1 and rank == 1:
                evs += _events(t)
            w.write({"pid": 100 + rank, "host": "h", "node_id": f"node{rank}", "node_ip": "127.0.0.1",
                     "clock_offset_ns": 1_000 * rank, "clock_rtt_ns": 300, "dropped": 0, "events": evs})
        drv = [ev.driver_call_event("update_actor", t - 500, 20_000, step, "update_actor", step + 1,
                                    {"group": "actor", "mode": "DP_COMPUTE_PROTO", "world": 2, "status": "ok",
                                     "t_dispatched": t - 100, "shards": [{"rows": 8}, {"rows": 8}]}),
               ev.slice_event("step", f"step {step}", t - 1_000, 30_000, "driver", 0, step, None)]
        w.write({"pid": 10, "host": "h", "node_id": "node10", "node_ip": "127.0.0.1", "events": drv})
        t += 100_000
    w.close()
    return spill




def _lines(path) -> list[str]:
    """The event lines (split at "\n" alone: a string may hold U+2028, which splitlines() splits at)."""
    return [ln.rstrip(",") for ln in Path(path).read_text(encoding="utf-8").split("\n") if ln.startswith("{")]


def _rank1(objs: list, name: str, ph: str = "X") -> list:
    return [o for o in objs if o.get("tid") == 2 and o.get("pid") == 2 and o["ph"] == ph and o.get("name") == name]


def test_every_kind_of_event_is_written_as_json_dumps_of_its_dict_with_the_layouts_args(tmp_path):
    spill = _write(tmp_path)
    done = export_spill(spill, str(tmp_path / "t.json"))
    lines = _lines(tmp_path / "t.json")
    objs = [json.loads(ln) for ln in lines]
    for ln, o in zip(lines, objs):
        assert ln == _dumps(o), ln   # no byte differs from json.dumps of what it holds
    assert done["written"] == len(lines) and done["events"] > 60
    layout = {"role": "actor", "rank": 1, "step": 3}
    norm = json.loads(json.dumps(ODD_ARGS))   # tuples as lists, as JSON has them
    for k, a in enumerate(norm):
        (x,), (c,), (i,) = _rank1(objs, f"odd {k}"), [o for o in objs if o.get("name") == f"rank 1 c{k}"], \
            _rank1(objs, f"i{k}", "i")
        assert json.dumps(x["args"]) == json.dumps(dict(a, **layout, method="update_actor")), k   # NaN == NaN
        assert json.dumps(c["args"]) == json.dumps(a) and json.dumps(i["args"]) == json.dumps(dict(a, **layout)), k
    assert math.isnan(_rank1(objs, "odd 0")[0]["args"]["nan"]) and _rank1(objs, "odd 1")[0]["args"]["u"] == (1 << 64) - 1
    other = [o["args"] for o in _rank1(objs, "other")]
    assert other == [{"raw": str(b"\x00bytes"), **layout, "method": "m"}, {"1": "int key", **layout, "method": "m"},
                     {"value": [1, "two"], **layout, "method": "m"}, {"value": "a string", **layout, "method": "m"}]
    # Falsy args: the layout's alone (a slice leaves out a step and a method that are None).
    assert [o["args"] for o in _rank1(objs, "falsy")] == [{"role": "actor", "rank": 1}] * 7
    assert [o["args"] for o in _rank1(objs, "falsy", "i")] == [{"role": "actor", "rank": 1, "step": None}] * 7
    # A slice's own args win over the layout's and come first; an instant's lose.
    (off,) = [o for o in objs if o.get("name") == "offload"]
    assert off["args"] == {"role": "mine", "rank": 9, "method": "other", "frees": ["optimizer"], "x": 1, "step": 3}
    assert _rank1(objs, "has step")[0]["args"] == {"step": "mine", "role": "actor", "rank": 1, "method": "m"}
    assert _rank1(objs, "step start", "i")[0]["args"] == {"step": 4, "role": "actor", "rank": 1}
    assert _rank1(objs, 'n"ame\n')[0]["args"] == {"a": 1, "role": "actor", "rank": 1, "step": "warmup"}
    assert _rank1(objs, "float step")[0]["args"] == {"role": "actor", "rank": 1, "step": 2.5, "method": 7}
    assert _rank1(objs, "mark", "i")[0]["args"] == {"role": "actor", "rank": 1, "step": "s"}
    assert [o["args"] for o in objs if o.get("name") == "rank 1 scalar"] == [5]
    assert not [o for o in objs if o.get("name") in ("unknown", "empty ph")]   # unknown phases: not written
    # The origin is the earliest time: an event before the trace's start moves it.
    assert _rank1(objs, "before origin")[0]["ts"] == "0.000"
    # Flows: a rank's call slice with an int flow carries the bind id its driver call's send and
    # recv carry; a call slice without one, or with one that is not an int, carries none.
    calls = [o for o in objs if o.get("cat") == "call"]
    flowed = [o for o in calls if o["name"] == "update_actor" and "flow" in o["args"]]
    assert len(flowed) == 8 and all(o["flow_in"] and o["flow_out"] for o in flowed)
    assert not [o for o in calls if "bind_id" in o and o not in flowed]
    for o in flowed:
        sends = [d for d in objs if d.get("cat") == "driver_call" and d["name"] == f"send → rank {o['args']['rank']}"
                 and d["args"]["flow"] == o["args"]["flow"]]
        recvs = [d for d in objs if d.get("cat") == "driver_call" and d["name"] == f"recv ← rank {o['args']['rank']}"
                 and d["args"]["flow"] == o["args"]["flow"]]
        assert [d["bind_id"] for d in sends + recvs] == [o["bind_id"]] * 2
    assert len({o["bind_id"] for o in flowed}) == 8


def test_the_file_exported_again_from_the_store_on_disk_is_the_same(tmp_path):
    """Every odd event goes into the store and comes back out as the same bytes: the export
    from the store file, opened afresh, writes what the export at ingest wrote."""
    from rldbg.store.schema import open_store
    spill = _write(tmp_path)
    one = export_spill(spill, str(tmp_path / "one.json"))
    conn = open_store(one["store"])
    got = export.export_store(conn, str(tmp_path / "got.json"))
    conn.close()
    assert got["written"] == one["written"] and got["events"] == one["events"]
    assert (tmp_path / "got.json").read_bytes() == (tmp_path / "one.json").read_bytes()


def test_rldbg_export_as_users_run_it_writes_the_same_file(tmp_path):
    spill = _write(tmp_path)
    export_spill(spill, str(tmp_path / "api.json"))
    out = tmp_path / "cli.json"
    r = subprocess.run([RLDBG, "export", spill, "-o", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == (tmp_path / "api.json").read_bytes()


def _raw_spill(tmp_path, events_bytes: bytes) -> str:
    """A spill holding a good batch, `events_bytes` as a batch's events, and a good batch."""
    spill = str(tmp_path / "raw.spill")
    w = SpillWriter(spill, {"origin_ns": T0, "job_id": "j"})
    good = encode_events([ev.slice_event("user", "ok", T0 + 10, 5, "actor", 0, 1, None, None, {"a": 1})])
    for eb in [good, events_bytes, good]:
        w.write_raw({"pid": 7, "host": "h", "dropped": 0}, eb)
    w.close()
    return spill


def _arr(*items: bytes) -> bytes:
    return bytes((0x90 | len(items),)) + b"".join(items)


def _event_bytes(ph=b"\xa1X", ts=b"\xce\x3b\x9a\xca\x10", args=b"\xc0", cat=b"\xa4user", role=b"\xa5actor",
                 rank=b"\x00") -> bytes:
    """One packed event named "n"; fields given as msgpack bytes."""
    return bytes((0x9b,)) + ph + cat + b"\xa1n" + ts + b"\x05" + role + rank + b"\x01\xc0\xc0" + args


# A batch's events as bytes another producer (or damage) may leave, and what the export does with
# it: the damage it names (the batch, or the events in it that are not rldbg's), or None and the
# args of the event it writes.
ODD_BATCHES = {
    "surrogate in a string": (_arr(_event_bytes(cat=b"\xa3\xed\xa0\x80")), "unreadable record"),
    "overlong utf-8": (_arr(_event_bytes(role=b"\xa2\xc0\xaf")), "unreadable record"),
    "cut short": (_arr(_event_bytes())[:-1], "unreadable record"),
    "trailing bytes": (_arr(_event_bytes()) + b"\xc0", "unreadable record"),
    "map key a map": (_arr(_event_bytes(args=b"\x81\x80\x01")), "unreadable record"),
    "count beyond the bytes": (b"\xdd\xff\xff\xff\xff" + _event_bytes(), "unreadable record"),
    "unused byte 0xc1": (_arr(_event_bytes(args=b"\xc1")), "unreadable record"),
    "timestamp ext as ts": (_arr(_event_bytes(ts=b"\xd6\xff\x00\x00\x00\x01")), "1 malformed event(s) in a batch"),
    "bool rank": (_arr(_event_bytes(rank=b"\xc3")), "1 malformed event(s) in a batch"),
    "ten fields": (_arr(b"\x9a" + _event_bytes()[1:-1]), "1 malformed event(s) in a batch"),
    "ph not a string": (_arr(_event_bytes(ph=b"\x01")), "1 malformed event(s) in a batch"),
    "not an array": (b"\x81\xa1a\x01", "all malformed event(s) in a batch"),
    "ext type in args": (_arr(_event_bytes(args=b"\xd4\x01\x00")), None),
    "a key twice": (_arr(_event_bytes(args=b"\x82\xa1a\x01\xa1a\x02")), None),   # the last one, as a dict keeps it
    "ts beyond int64": (_arr(_event_bytes(ts=b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff")),
                        "1 malformed event(s) in a batch"),
}


@pytest.mark.parametrize("what", sorted(ODD_BATCHES))
def test_an_odd_batch_is_named_as_damage_or_written_and_the_batches_around_it_are_kept(tmp_path, what):
    eb, named = ODD_BATCHES[what]
    damage: list = []
    export_spill(_raw_spill(tmp_path, eb), str(tmp_path / "t.json"), damage=damage)
    objs = [json.loads(ln) for ln in _lines(tmp_path / "t.json")]
    assert len([o for o in objs if o.get("name") == "ok"]) == 2
    written = [o for o in objs if o.get("name") == "n"]
    if named is None:
        assert damage == [] and len(written) == 1
        args = {k: v for k, v in written[0]["args"].items() if k not in ("role", "rank", "step")}
        assert args == {"ext type in args": {"value": "ExtType(code=1, data=b'\\x00')"}, "a key twice": {"a": 2}}[what]
    else:
        assert [d[2] for d in damage if not d[2].startswith(named)] == [] and len(damage) == 1, damage
        assert written == []


def test_the_index_learns_counts_times_tracks_and_call_ends(tmp_path):
    """From a batch as it goes into the store (see()), and back from the store (from_store()),
    with the rank slices that end each driver call."""
    from rldbg.store.ingest import from_spill
    from rldbg.store.tracks import Tracks
    evs = [ev.slice_event("call", "a", 50, 7, "actor", 1, 0, "m", 3, None),
           ev.slice_event("call", "b", 20, 1, "actor", 1, 0, "m", None, None),   # no flow: not a call end
           ev.instant_event("user", "x", 30, "critic", 0, 0, None, None),
           ev.driver_call_event("m", 10, 100, 0, "m", 3, {}),
           ev.driver_call_event("m", 10, 100, 0, "m", None, {}),
           ev.memory_event(40, "actor", 1, 0, None, {"rss": 1})]
    idx = Tracks({})
    idx.see({"pid": 1, "host": "h"}, evs)
    want = (6, {"h:1": 10}, {"driver": 1, "actor": 2, "critic": 3}, {"driver": {0}, "actor": {1}, "critic": {0}})
    assert (idx.n, idx.first, idx.roles, idx.ranks) == want
    spill = str(tmp_path / "s.spill")
    w = SpillWriter(spill, {"origin_ns": 0, "job_id": "j"})
    w.write({"pid": 1, "host": "h", "dropped": 0, "events": evs})
    w.close()
    back = Tracks.from_store(from_spill(spill, ":memory:"), align=True)
    assert (back.n, back.first, back.roles, back.ranks) == want
    assert back.rank_ends == {3: {("actor", 1): (50, 57)}}   # "a" (flow 3) from start to end, on the trace's clock


def test_a_write_that_fails_raises_out_of_the_export(tmp_path):
    """/dev/full answers every write with ENOSPC: the export says so, it does not claim a trace."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    out = tmp_path / "full.json"
    out.symlink_to("/dev/full")   # written through, as a path the user named
    with pytest.raises(OSError, match="No space"):
        export_spill(_write(tmp_path), str(out))
