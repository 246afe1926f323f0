"""`rldbg report`'s import of a Chrome JSON trace into a store (rldbg.store.chrome_import, read back
into rldbg.trace.report_trace.Trace by rldbg.store.queries) over lines in every form a writer or
an editor leaves: the damage notes say what was skipped, and the store holds what the file's
readable events hold (the same Trace as a clean file of just those events); an exported run
reads the same from its own store as from its Perfetto file imported; and the CLI prints the
report, as text and as JSON, of a trace with damage."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from rldbg import sentinel
from trace_of import load_trace
from rldbg.trace.report import Trace, read_trace

RLDBG = str(Path(sys.executable).with_name("rldbg"))

_CALL = ('{"ph":"X","pid":2,"tid":1,"cat":"call","name":"update","ts":"10.000","dur":"5.000",'
         '"args":{"role":"actor","rank":0,"step":1,"method":"update","flow":1},"bind_id":3,"flow_in":true}')
# Lines in every form a writer or an editor leaves: kept and dropped slices, instants and counters,
# escapes, \\u, non-ASCII, exponents, big integers, numeric and odd times, repeated keys, odd args,
# fields of types rldbg does not write, malformed events, two events on a line.
LINES = [
    '{"ph":"M","pid":2,"name":"process_name","args":{"name":"actor"}}',
    '{"ph":"M","pid":3,"name":"process_name","args":{"name":"crític"}}',
    '{"ph":"M","pid":2,"tid":1,"name":"thread_name","args":{"pid":1,"node_id":"n","node_ip":"","name":"rank 0"}}',
    _CALL,
    # a call whose role comes from its process, named further down
    '{"ph":"X","pid":4,"tid":2,"cat":"call","name":"gen","ts":"11.000","dur":"2.000",'
     '"args":{"rank":1,"step":1,"method":"gen","flow":2}}',
    '{"ph":"X","pid":2,"cat":"call","name":"更新","ts":"14.500","dur":"1.000","args":{"rank":0,"who":"crític",'
     '"l":[1,2.5,{"x":null,"y":[]}],"b":false}}',
    '{"ph":"X","pid":2,"cat":"call","name":"no dur","ts":"14.600","args":null}',
    '{"ph":"X","cat":"call","ts":"14.700","dur":"1.000"}',   # no name (nor pid or args)
    '{"ph":"X","pid":2,"cat":"call","name":"","ts":"14.710","dur":"1.000"}',   # no pid or args
    # fields of types rldbg does not write: counted and skipped (report_trace._bad_field)
    '{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.720","dur":"1.000","args":{"rank":"1"}}',
    '{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.721","dur":"1.000","args":{"rank":true}}',
    '{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.722","dur":"1.000","args":{"step":1.5}}',
    '{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.723","dur":"1.000","args":{"method":["u"]}}',
    '{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.724","dur":"1.000","args":{"flow":1.5}}',
    '{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.725","dur":"1.000","args":{"mem_after":"5"}}',
    '{"ph":"X","pid":2,"cat":"transition","name":"t","ts":"14.726","dur":"1.000","args":{"frees":"params"}}',
    '{"ph":"X","pid":2,"cat":"transition","name":"t","ts":"14.727","dur":"1.000","args":{"loads":["a",1]}}',
    '{"ph":"X","pid":2,"cat":"transition","name":"t","ts":"14.728","dur":"1.000",'
     '"args":{"frees":[],"loads":null,"mem_before":null,"mem_after":1.5,"step":null,"method":null,"flow":"f"}}',
    '{"ph":"X","pid":2,"cat":"call","name":"role 5","ts":"14.750","dur":"1.000","args":{"role":5}}',
    '{"ph":"X","pid":2,"cat":"call","name":"role null","ts":"14.760","dur":"1.000","args":{"role":null}}',
    '{"ph":"M","pid":7,"name":"process_name","args":{"name":7}}',   # names nothing
    '{"ph":"X","pid":2,"cat":"call","name":"dur a number","ts":"14.800","dur":1}',
    '{"ph":"X","pid":"2","cat":"call","name":"pid text","ts":"14.900","dur":"1.000"}',
    '{"ph":"X","pid":2,"cat":"call","name":"nested twice","ts":"14.950","dur":"1.000",'
     '"args":{"rank":0,"m":{"a":1,"a":2}}}',
    '{"ph":"X","pid":2,"cat":"call","name":"19 digits","ts":"14.960","dur":"1.000",'
     '"args":{"rank":0,"big":1700000000000000000}}',
    '{"ph":"X","pid":2,"cat":"call","name":"n","ts":12,"dur":1.5,"args":{"rank":0}}',
    '{"ph":"X","pid":2,"cat":"call","name":"two decimals","ts":"13.50","dur":"1","args":{"rank":0}}',
    '{"ph":"X","pid":2,"cat":"call","name":"更新","ts":"14.000","dur":"1.000","args":{"rank":0,"note":"a\\"b\\n"}}',
    '{"ph":"X","pid":2,"cat":"call","name":"\\u00e9","ts":"15.000","dur":"1.000","args":{"rank":0}}',
    '{"ph":"X","pid":3,"tid":1,"cat":"transition","name":"offload","ts":"16.000","dur":"1.000",'
     '"args":{"role":"actor","rank":0,"step":1,"frees":["params"],"mem_before":10,"mem_after":5}}',
    '{"ph":"X","pid":1,"tid":1,"cat":"step","name":"step 1","ts":"0.000","dur":"100.000",'
     '"args":{"role":"driver","rank":0,"step":1}}',
    '{"ph":"X","pid":1,"tid":1,"cat":"driver_call","name":"update","ts":"9.000","dur":"7.000",'
     '"args":{"role":"driver","rank":0,"step":1,"mode":"DP_COMPUTE_PROTO"}}',
    '{"ph":"X","pid":1,"tid":1,"cat":"driver_call","name":"dispatch","ts":"9.000","dur":"1.000",'
     '"args":{"role":"driver","rank":0,"step":1}}',
    '{"ph":"X","pid":1,"cat":"driver_call","name":"send","ts":"9.500","dur":"1.000","args":null}',
    '{"ph":"X","pid":1,"cat":"driver_call","name":"wait","ts":"9.600","dur":"1.000"}',
    # "mode" only in a nested object
    '{"ph":"X","pid":1,"cat":"driver_call","name":"recv","ts":"9.700","dur":"1.000","args":{"x":{"mode":1}}}',
    '{"ph":"X","pid":1,"cat":"driver_call","name":"m\\u006fde","ts":"9.800","dur":"1.000",'
     '"args":{"m\\u006fde":1}}',   # "mode" spelled with an escape
    '{"ph":"X","pid":2,"tid":1,"cat":"user","name":"forward","ts":"10.010","dur":"1.000",'
     '"args":{"role":"actor","rank":0,"step":1,"method":"update"}}',
    '{"ph":"X","pid":2,"cat":"user","name":"nested","ts":"10.020","dur":"1.000",'
     '"args":{"a":[1,[2,{"b":null}],"x"],"m":{},"f":-0.5,"t":true}}',
    '{"ph":"X","pid":2,"cat":"user","name":"exp","ts":"10.030","dur":"1.000","args":{"e":1e5}}',
    '{"ph":"X","pid":2,"cat":"user","name":"exp-3","ts":"10.036","dur":"1.000","args":{"e":1E-300}}',
    '{"ph":"X","pid":2,"cat":"user","name":"big","ts":"10.040","dur":"1.000",'
     '"args":{"i":123456789012345678901234}}',
    '{"ph":"X","pid":2,"cat":"user","name":"ünïcode ✓","ts":"10.050","dur":"1.000","args":{"s":"😀"}}',
    '{"ph":"X","pid":2,"name":"no cat","ts":"10.060","dur":"1.000"}',
    '{"ph":"X","pid":2,"cat":1,"name":"cat a number","ts":"10.070","dur":"1.000"}',
    '{"ph":"X","pid":2,"cat":["call"],"name":"cat a list","ts":"10.080","dur":"1.000"}',
    '{"ph":"X","pid":2,"cat":"user","name":"dur 0","ts":"10.090"}',
    ' { "ph" : "X" , "pid" : 2 , "cat" : "call" , "name" : "spaced" , "ts" : "17.000" , "dur" : "1.000" ,'
     ' "args" : { "rank" : 0 , "l" : [ 1 , { } ] } } ',
    '{"ph":"X","ph":"i","pid":2,"cat":"user","name":"ph twice","ts":"18.000","dur":"1.000"}',
    '{"ph":"X","pid":2,"cat":"user","cat":"call","name":"cat twice","ts":"18.500","dur":"1.000",'
     '"args":{"rank":0}}',
    '{"ph":"i","s":"g","pid":1,"tid":1,"name":"rldbg trace start","ts":"0.000",'
     '"args":{"origin_unix_ns":1700000000000000000,"clock":{"aligned":true,"max_uncertainty_ns":1000,'
     '"processes":{}}}}',
    '{"ph":"i","s":"t","pid":1,"tid":1,"name":"rldbg trace losses","ts":"99.000",'
     '"args":{"total_lost":3,"by_cause":{"buffer full":3}}}',
    json.dumps({"ph": "i", "s": "t", "pid": 2, "tid": 1, "cat": "sentinel", "name": sentinel.EVENT,
                 "ts": "19.000", "args": {"role": "actor", "rank": 0, "step": 1, "where": "loss"}},
                separators=(",", ":")),
    '{"ph":"i","s":"t","pid":2,"tid":1,"cat":"user","name":"mark","ts":"20.000","args":{"role":"actor"}}',
    '{"ph":"I","pid":2,"name":"mark","ts":"20.500"}',
    '{"ph":"i","pid":2,"ts":"20.600"}',
    '{"ph":"i","pid":2,"name":7,"ts":"20.700"}',
    '{"ph":"C","pid":2,"name":"rank 0 memory","ts":"21.000","args":{"rss":1073741824,"device_used":5}}',
    '{"ph":"C","pid":2,"name":"rank 0 memory","ts":"20.000","args":{"rss":1073741000}}',
    '{"ph":"C","pid":2,"name":"rank 0 ledger","ts":"21.000","args":{"params":2654720}}',
    '{"ph":"C","pid":3,"name":"rank 0 ledger","ts":"21.500","args":{"grads":0.5,"optimizer":-3}}',
    '{"ph":"C","pid":3,"name":"rank 0 ledger","ts":"21.600","args":{"grads":1,'
     '"kv_cache":null,"w":true,"tag":"x"}}',   # samples that are not numbers
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":22,"args":{"rss":7}}',        # ts a number
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"22.50","args":{"rss":8}}',   # not "123.456"
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"23.000","args":{"rss":{"x":1}}}',
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"23.500","args":{"rss":1,"rss":2}}',
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"24.000","args":{"rss":1e3,"f":-2.7939677238464355e-09}}',
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"24.200","args":{"rss":1e+100}}',
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"24.500","args":{"rss":"\\u0031"}}',
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"25.000","args":{' +
     ",".join(f'"s{i}":{i}' for i in range(17)) + "}}",   # 17 series
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"25.500","args":{' +
     ",".join(f'"s{i}":{i}' for i in range(16)) + "}}",
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"26.000","args":{}}',
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"26.500","args":null}',
    '{"ph":"C","pid":2,"name":"rank 1 memory","ts":"27.000"}',
    '{"ph":"C","pid":"2","name":"rank 1 memory","ts":"27.500","args":{"rss":9}}',
    '{"ph":"C","name":"rank 1 memory","ts":"28.000","args":{"rss":9}}',
    '{"ph":"C","pid":2,"name":["rank 0 memory"],"ts":"28.500","args":{"rss":2}}',
    '{"ph":"C","pid":2,"name":"rank 0 memory\\n","ts":"28.700","args":{"rss":3}}',
    '{"ph":"C","pid":4,"name":"rank 1 memory","ts":"29.000","args":{"rss":11}}',
    '{"ph":"C","pid":9,"name":"rank 0 memory","ts":"29.500","args":{"rss":12}}',   # never named
    '{"ph":"C","pid":2,"name":"x","ts":"30.000","args":{"v":1}}',   # a user counter: dropped
    '{"ph":"C","pid":1,"name":"rldbg dropped events","ts":"31.000","args":{"total":4}}',
    '{"ph":"C","pid":1,"name":"rldbg dropped events","ts":"30.000","args":{"total":2}}',
    '{"ph":"C","pid":2,"name":"rank 0 memory","ts":"-0.001","args":{"rss":-1}}',
    '{"ph":"X","ts":"soon","name":"malformed"}',
    '{"ts":"1.000"}',
    '5',
    '"text"',
    '{"ph":"C","ts":"1.000","args":[1]}',
    '{"ph":1,"ts":"1.000"}',
    '{"ph":"X","ts":"1.000","dur":"long"}',
    '{"ph":"Z","anything":1}',
    '{"ph":"XX","ts":"1.000"}',
    '{"ph":"s","pid":2,"id":1,"ts":"1.000"}',
    '{"ph":"B","pid":2,"name":"b","ts":"2.000"}\r',
    '{"ph":"X","pid":2,"cat":"user","name":"a","ts":"3.000","dur":"1.000"},'
     '{"ph":"X","pid":2,"cat":"user","name":"b","ts":"4.000","dur":"1.000"}',   # two on a line
    '{"ph":"M","pid":4,"name":"process_name","args":{"name":"rollout"}}',
    '',
]


def _text(lines) -> bytes:
    return ("[\n" + ",\n".join(lines) + "\n]\n").encode()


def _facts(t: Trace) -> dict:
    return {"calls": t.calls, "transitions": t.transitions, "driver_calls": t.driver_calls, "steps": t.steps,
            "mem": dict(t.mem), "ledger": dict(t.ledger), "gpus": t.gpus, "ranks": t.ranks, "start": t.start,
            "instants": t.instants, "dropped": t.dropped_total}


def _clean(tmp_path, events: list, name: str = "clean.json") -> Trace:
    """The Trace of a file holding just `events`, written whole by json.dumps."""
    path = tmp_path / name
    path.write_text(json.dumps(events))
    return read_trace(str(path))


def _events(lines) -> list:
    return [e for line in lines if line.strip() for e in orjson.loads(b"[" + line.encode() + b"]")]


NOTES = ["7 malformed event(s) skipped (missing or bad ph/ts/dur/args)",
         "9 rldbg slice(s) skipped for a field of a type rldbg does not write "
         "(flow 1, frees 1, loads 1, mem_after 1, method 1, name 1, rank 2, step 1)",
         "5 counter sample(s) skipped: a value that is not a number"]


def test_every_kind_of_line_is_imported_with_the_notes_that_say_what_was_skipped(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(_text(LINES))
    t = read_trace(str(path))
    assert t.notes == NOTES
    good, _ = load_trace(str(path))
    assert _facts(t) == _facts(_clean(tmp_path, good))   # the readable events alone: the same store
    assert list(zip(*t.mem[("actor", 0, "rss")]))[:2] == [(-1, -1), (20000, 1073741000)]   # in time order
    assert t.dropped_total == 4 and t.calls[1]["role"] == "rollout"   # named by a line after its call
    assert [e["name"] for e in t.instants] == [sentinel.EVENT, "rldbg trace losses"]   # in time order
    assert t.start["clock"]["max_uncertainty_ns"] == 1000
    assert [d["name"] for d in t.driver_calls] == ["update", "mode"]   # the calls themselves ("mode" escaped), not their parts
    assert t.ranks == [{"role": "actor", "rank": 0, "node": "n", "ip": "", "pid": 1}]


@pytest.mark.parametrize("text", [
    '[\n{"ph":"X","ts":"1.000"}\n{"ph":"X","ts":"2.000"}\n]',            # a comma missing
    '[\n{"ph":"X","ts":"1.000"},\n{"ph":"X",\n"ts":"2.000"}\n]',         # an event over two lines
    '[\n{"ph":"X","ts":"1.000"},\n{"ph":"X","ts":"2.000"}},\n{"ph":"X","ts":"3.000"}\n]',   # a brace too many
    '[\n{"ph":"X","ts":"1.000",},\n{"ph":"X","ts":"3.000"}\n]',          # a comma inside
    '[\n{"ph":"X","ts":"1.0\x01"},\n{"ph":"X","ts":"3.000"}\n]',          # a control character
    '[\n{"ph":"X","ts":NaN},\n{"ph":"X","ts":"3.000"}\n]',
    '[\n{"ph":"X","ts":01},\n{"ph":"X","ts":"3.000"}\n]',
    '[\n{"ph":"X","name":"\\x"},\n{"ph":"X","ts":"3.000"}\n]',            # no such escape
    '[\n{"ph":"X","cat":"user","name":"\xc0\xaf","ts":"1.000"}\n]',       # not UTF-8 (latin-1 below)
])
def test_a_damaged_file_is_imported_with_the_tolerant_readers_notes(tmp_path, text):
    path = tmp_path / "t.json"
    path.write_bytes(text.encode("latin-1"))
    t = read_trace(str(path))
    events, notes = load_trace(str(path))
    assert t.notes[:len(notes)] == notes
    assert _facts(t) == _facts(_clean(tmp_path, events))


def test_files_the_tolerant_reader_takes_are_imported_as_their_events_are(tmp_path):
    """Pretty-printed, a missing comma, a number orjson refuses, a file cut short: each with the
    notes the tolerant reader gives."""
    good = LINES[:12]
    refused = '{"ph":"X","pid":2,"cat":"user","name":"exp3","ts":"10.035","dur":"1.000","args":{"e":1e400}}'
    for name, text in [("pretty", json.dumps([json.loads(x) for x in good], indent=1).encode()),
                       ("comma", _text(good).replace(b"},\n", b"}\n", 1)),
                       ("refused", _text(good + [refused])),
                       ("cut", _text(good)[:-60])]:
        path = tmp_path / f"{name}.json"
        path.write_bytes(text)
        t = read_trace(str(path))
        events, notes = load_trace(str(path))
        assert t.notes[:len(notes)] == notes, name
        assert _facts(t) == _facts(_clean(tmp_path, events)), name
        if name == "pretty":
            assert _facts(t) == _facts(_clean(tmp_path, _events(good))) and not notes
        if name == "cut":
            assert notes and notes[0].startswith("truncated")


def test_counter_values_are_the_values_json_holds(tmp_path):
    rnd = __import__("random").Random(7)
    values = [rnd.uniform(-1e6, 1e6) for _ in range(300)] + [rnd.random() * 10 ** -rnd.randint(0, 12)
                                                             for _ in range(300)]
    texts = [repr(v) for v in values] + ["0.1", "-0.0", "123456789012345678", "-999999999999999999", "0",
                                         "1.7976931348623157", "1E5", "2.5e+07", "-4e-99", "9.999999999999999e99"]
    lines = [f'{{"ph":"C","pid":2,"name":"rank 0 memory","ts":"{i}.000","args":{{"v":{v}}}}}'
             for i, v in enumerate(texts)]
    lines.insert(0, '{"ph":"M","pid":2,"name":"process_name","args":{"name":"actor"}}')
    path = tmp_path / "t.json"
    path.write_bytes(_text(lines))
    got = read_trace(str(path)).mem[("actor", 0, "v")][1]
    want = [json.loads(x) for x in texts]
    assert [(type(v), v, str(v)) for v in got] == [(type(v), v, str(v)) for v in want]


def test_an_exported_run_reads_the_same_from_its_store_as_from_its_file_imported(tmp_path):
    from rldbg.trace import events as ev
    from rldbg.trace.export import export_spill
    from rldbg.trace.spill import SpillWriter
    t0 = 1_700_000_000_000_000_000
    spill = str(tmp_path / "run.spill")
    w = SpillWriter(spill, {"origin_ns": t0, "job_id": "j"})
    batch = []
    for i in range(3000):
        rank, t = i % 4, t0 + i * 1_000_000
        if i % 100 == 0:
            batch.append(ev.slice_event("step", f"step {i // 100}", t, 99_000_000, "driver", 0, i // 100, None))
        batch += [ev.slice_event("call", "update_actor", t, 900_000, "actor", rank, i // 100, "update_actor", i,
                                 {"group": "actor", "n": [1, 2.5, None], "flow": i}),   # as rldbg's calls carry it
                  ev.slice_event("user", "forward", t + 10, 1000, "actor", rank, i // 100, "update_actor", None, {}),
                  ev.memory_event(t, "actor", rank, None, None, {"rss": (1 << 30) + i}),
                  ev.instant_event("user", "mark", t, "actor", rank, None, None, {})]
    w.write({"pid": 1, "host": "h", "dropped": 0, "events": batch})
    w.close()
    out = str(tmp_path / "run.json")
    info = export_spill(spill, out)
    own = read_trace(info["store"])
    imported = _clean(tmp_path, load_trace(out)[0], "copy.json")
    for t in (own, imported):   # the exported args carry the layout's keys too; the analyses read the rest
        for s in t.calls + t.steps:
            s["args"] = {k: v for k, v in s["args"].items() if k not in ("role", "rank", "step", "method", "node", "ip")}
    assert _facts(own) == _facts(imported) and own.notes == imported.notes == []
    assert len(own.calls) == 3000 and len(own.steps) == 30 and len(own.mem[("actor", 0, "rss")][0]) == 750


def test_rldbg_report_on_a_damaged_trace_as_users_run_it(tmp_path):
    """Its malformed events make it a damaged trace (exit 3); text and JSON say what was read."""
    path = tmp_path / "t.json"
    path.write_bytes(_text([line for line in LINES if line] * 50))
    outs = []
    for extra in ([], ["--json"]):
        r = subprocess.run([RLDBG, "report", str(path), *extra], capture_output=True, text=True, timeout=120)
        assert r.returncode == 3, r.stderr
        outs.append(r.stdout)
    assert "malformed" in outs[0] and json.loads(outs[1])["memory_peaks"]
