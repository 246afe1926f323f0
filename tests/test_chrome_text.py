"""The exporter's Chrome JSON text (rldbg.trace.chrome_text) is built from cached pieces (a
template per track/step/method, a prefix per track, the shared args of a driver call's slices)
for speed; what it writes must still be, line for line, the text json.dumps writes for the
event's dict, with the keys in the layout's order. Checked on the events a run really records:
call slices and transitions whose args repeat role/rank/step/method, user spans with args of
their own (floats JSON writes with an exponent, NaN), instants overriding the step, counters of
the same track across steps and methods, driver calls with shards, results and flows."""
from __future__ import annotations

import json
import sqlite3

from rldbg.trace import events as ev
from rldbg.trace.chrome_text import COUNTER_LINE
from rldbg.trace.export import export_spill
from rldbg.trace.spill import SpillWriter

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _trace(tmp_path) -> list[str]:
    spill = str(tmp_path / "t.spill")
    w = SpillWriter(spill, {"origin_ns": 1_000_000_000, "job_id": "j"})
    t = 1_000_000_000
    for step in range(3):
        flow, evs = 10 + step, []
        for r in range(2):
            evs.append(ev.slice_event("call", "update_actor", t + 1_000 + r, 5_000_123, "actor", r, step,
                                      "update_actor", flow, {"role": "actor", "rank": r, "step": step,
                                                             "method": "update_actor", "flow": flow, "group": "actor",
                                                             "mem_before": 1, "mem_after": 2}))
            evs.append(ev.transition_event("offload_optimizer", t + 1_500, 20, "actor", r, step, "update_actor",
                                           {"role": "actor", "rank": r, "step": step, "method": "update_actor",
                                            "frees": ("optimizer",), "mem_before": 9, "mem_after": 3}))
            evs.append(ev.slice_event("user", "fwd", t + 2_000, 10, "actor", r, step, "update_actor", None,
                                      {"loss": 0.5, "tiny": 1e-7, "bad": float("nan")}))
            evs.append(ev.slice_event("user", "bwd", t + 3_000, 10, "actor", r, step, "update_actor"))
            evs.append(ev.instant_event("user", "mark", t + 4_000, "actor", r, step, None, {"step": 99, "x": None}))
            evs.append(ev.instant_event("user", "note", t + 4_500, "actor", r, step, None, {"x": "é"}))
            evs.append(ev.memory_event(t + 5_000, "actor", r, step, "update_actor", {"rss": 123 + step}))
            evs.append(ev.ledger_event(t + 6_000, "actor", r, step, None, "params", 7))
        w.write({"pid": 7, "host": "h", "node_id": "abcdef0123", "node_ip": "127.0.0.1", "dropped": 0,
                 "events": evs})
        w.write({"pid": 1, "host": "h", "dropped": 0, "events": [ev.driver_call_event(
            "actor.update_actor", t, 6_000_000, step, "update_actor", flow,
            {"group": "actor", "mode": "DP_COMPUTE_PROTO", "world": 2, "status": "ok", "t_dispatched": t + 500,
             "shards": [{"rows": 4, "nbytes": 8, "keys": ["a"]}, {"rows": 3, "nbytes": 6, "keys": ["a"]}],
             "result": {"score": float("inf")}})]})
        t += 10_000_000
    w.close()
    out = tmp_path / "t.json"
    export_spill(spill, str(out))
    return [ln.rstrip(",") for ln in out.read_text(encoding="utf-8").splitlines() if ln.startswith("{")]


def test_every_line_is_json_dumps_text_and_args_keep_the_layouts_order(tmp_path):
    lines = _trace(tmp_path)
    objs = [json.loads(ln) for ln in lines]
    for ln, o in zip(lines, objs):
        assert ln == _dumps(o), ln   # no byte differs from json.dumps of what it holds

    calls = [o for o in objs if o.get("cat") == "call"]
    assert len(calls) == 6
    # Its own args in their order, then what the layout adds that they lack (where it runs).
    assert all(list(o["args"]) == ["role", "rank", "step", "method", "flow", "group", "mem_before", "mem_after",
                                   "node", "ip"] for o in calls), calls
    assert {(o["args"]["node"], o["args"]["ip"]) for o in calls} == {("abcdef01", "127.0.0.1")}
    assert all("bind_id" in o and o["flow_in"] and o["flow_out"] for o in calls)
    trans = [o for o in objs if o.get("cat") == "transition"]
    assert [o["args"]["step"] for o in trans] == [0, 0, 1, 1, 2, 2] and all(
        list(o["args"]) == ["role", "rank", "step", "method", "frees", "mem_before", "mem_after"] for o in trans)
    fwd = [o for o in objs if o.get("name") == "fwd"]
    assert list(fwd[0]["args"]) == ["loss", "tiny", "bad", "role", "rank", "step", "method"]
    assert '"tiny":1e-07,"bad":NaN,' in next(ln for ln in lines if '"name":"fwd"' in ln)
    bwd = [o for o in objs if o.get("name") == "bwd"]
    assert [o["args"] for o in bwd[:2]] == [{"role": "actor", "rank": r, "step": 0, "method": "update_actor"}
                                           for r in (0, 1)]
    marks = [o for o in objs if o.get("name") == "mark"]
    assert all(o["args"] == {"step": o["args"]["step"], "x": None, "role": "actor", "rank": o["args"]["rank"]}
               for o in marks) and {o["args"]["step"] for o in marks} == {0, 1, 2}   # the event's own step wins
    assert [o["args"] for o in objs if o.get("name") == "note"][0] == {"x": "é", "role": "actor", "rank": 0,
                                                                      "step": 0}
    # One counter track per rank and series, whatever step or method a sample was taken in.
    mem = [o for o in objs if o.get("ph") == "C" and o["name"].endswith("memory")]
    assert [(o["name"], o["args"]) for o in mem if o["name"] == "rank 1 memory"] == [
        ("rank 1 memory", {"rss": 123 + s}) for s in range(3)]
    assert len({o["pid"] for o in mem}) == 1
    assert len([o for o in objs if o.get("ph") == "C" and o["name"] == "rank 0 ledger"]) == 3


def test_a_driver_call_becomes_its_call_dispatch_sends_wait_and_recvs(tmp_path):
    objs = [json.loads(ln) for ln in _trace(tmp_path)]
    drv = [o for o in objs if o.get("cat") == "driver_call" and o["args"]["step"] == 1]
    assert [o["name"] for o in drv] == ["update_actor", "dispatch", "send → rank 0", "send → rank 1", "wait",
                                        "recv ← rank 0", "recv ← rank 1"]
    call, dispatch, s0, s1, wait, r0, r1 = drv
    base = {"role": "driver", "group": "actor", "method": "update_actor", "step": 1, "flow": 11}
    assert list(call["args"]) == [*base, "mode", "world", "status", "error", "result"]
    assert call["args"] == dict(base, mode="DP_COMPUTE_PROTO", world=2, status="ok", error=None,
                                result={"score": float("inf")})
    assert (call["ts"], call["dur"]) == ("10000.000", "6000.000")
    assert dispatch["args"] == base == wait["args"] and (dispatch["dur"], wait["ts"]) == ("0.500", "10000.500")
    assert s0["args"] == dict(base, rank=0, shard={"rows": 4, "nbytes": 8, "keys": ["a"]})
    assert list(s0["args"]) == [*base, "rank", "shard"] and list(r0["args"]) == [*base, "rank", "role_served"]
    assert list(s0) == ["ph", "pid", "tid", "cat", "name", "ts", "dur", "args", "bind_id", "flow_out"]
    assert list(r0) == ["ph", "pid", "tid", "cat", "name", "ts", "dur", "args", "bind_id", "flow_in"]
    assert (s1["ts"], s1["dur"], s1["args"]["rank"]) == ("10000.250", "0.250", 1)
    assert r1["args"] == dict(base, rank=1, role_served="actor") and r1["dur"] == "0.000"
    # The flows: each send and recv carries the bind id of that rank's slice of the call.
    ranks = {o["args"]["rank"]: o["bind_id"] for o in objs if o.get("cat") == "call" and o["args"]["step"] == 1}
    assert (s0["bind_id"], s0["flow_out"], r0["bind_id"], r0["flow_in"]) == (ranks[0], True, ranks[0], True)
    assert s1["bind_id"] == r1["bind_id"] == ranks[1] != ranks[0]
    assert "flow_in" not in s0 and "flow_out" not in r0


def test_sqlite_writes_a_counters_time_as_divmod_does():
    """COUNTER_LINE floor-divides ts + the ns to add as divmod does: before the origin too, and at
    the ends of 64 bits, where their sum would leave them."""
    conn = sqlite3.connect(":memory:")
    sql = f"SELECT {COUNTER_LINE} FROM (SELECT ? AS ts, NULL AS args) e, (SELECT 'p' AS pre, ? AS q, ? AS r) c"
    for ts in (0, 999, 1000, -1, -999, -1000, -1001, 1 << 62, (1 << 63) - 1, -(1 << 63)):
        for add in (0, 1, -1, 1500, -1500, -(1 << 63), (1 << 63) - 1):
            q, r = divmod(ts + add, 1000)
            assert conn.execute(sql, (ts, *divmod(add, 1000))).fetchone()[0] == f'p{q}.{r:03d}","args":null}},\n'


def test_a_rank_that_starts_early_in_the_dispatch_keeps_its_flow(tmp_path):
    """The sends share the dispatch evenly, except that none starts after its rank's slice: trace
    processor joins v2 flows in time order, and rank 1 starting 100 ns into a 1 µs dispatch (before
    its even share at 500 ns, as a loaded machine does) would otherwise lose its send → slice flow."""
    from trace_processor import query
    spill = str(tmp_path / "t.spill")
    w = SpillWriter(spill, {"origin_ns": 1_000_000_000, "job_id": "j"})
    t = 1_000_000_000
    w.write({"pid": 7, "host": "h", "dropped": 0, "events": [
        ev.slice_event("call", "update_actor", t + start, 5_000, "actor", r, 0, "update_actor", 5,
                       {"role": "actor", "rank": r, "step": 0, "method": "update_actor", "flow": 5})
        for r, start in ((0, 2_000), (1, 100))]})
    w.write({"pid": 1, "host": "h", "dropped": 0, "events": [ev.driver_call_event(
        "actor.update_actor", t, 10_000, 0, "update_actor", 5,
        {"group": "actor", "mode": "DP_COMPUTE_PROTO", "world": 2, "status": "ok", "t_dispatched": t + 1_000})]})
    w.close()
    out = str(tmp_path / "t.json")
    export_spill(spill, out)
    sends = [o for o in map(json.loads, (ln.rstrip().rstrip(",") for ln in open(out, encoding="utf-8")
                                            if ln.startswith("{")))
             if o["name"].startswith("send")]
    assert [(o["ts"], o["dur"]) for o in sends] == [("0.000", "0.099"), ("0.099", "0.901")]
    rows = query(out, """select src.name as src, dst.name as dst from flow f join slice src on f.slice_out = src.id
                         join slice dst on f.slice_in = dst.id order by src.name, dst.name""")
    assert [(r["src"], r["dst"]) for r in rows] == [
        ("send → rank 0", "update_actor"), ("send → rank 1", "update_actor"),
        ("update_actor", "recv ← rank 0"), ("update_actor", "recv ← rank 1")]
