"""`rldbg report`'s C line reader (rldbg/trace/_lines_c.c) against reading every event in Python:
built and in use where the suite runs, it leaves the report's Trace exactly as the Python leaves it
over lines made to reach each of its branches (kept and dropped slices, instants and counters in
every form a writer or an editor leaves: escapes, \\u, non-ASCII, exponents, big integers, numeric
and odd times, repeated keys, odd args, malformed events), answers itself exactly the lines it
should, and sends a file that is not one event per line to the tolerant reader."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from rldbg import fastpath, sentinel
from rldbg.trace import load_pieces
from rldbg.trace.report_trace import Trace, read_trace

RLDBG = str(Path(sys.executable).with_name("rldbg"))
C = fastpath.LINES   # None only where the build failed: test_the_switch_and_the_cli says so

_CALL = ('{"ph":"X","pid":2,"tid":1,"cat":"call","name":"update","ts":"10.000","dur":"5.000",'
         '"args":{"role":"actor","rank":0,"step":1,"method":"update","flow":1},"bind_id":3,"flow_in":true}')
# (line, what the C does with it alone: "skip", "file" (a counter sample filed), "slice" (a kept
# slice's record made) or "other" (handed back))
LINES = [
    ('{"ph":"M","pid":2,"name":"process_name","args":{"name":"actor"}}', "other"),
    ('{"ph":"M","pid":3,"name":"process_name","args":{"name":"crític"}}', "other"),
    ('{"ph":"M","pid":2,"tid":1,"name":"thread_name","args":{"pid":1,"node_id":"n","node_ip":"","name":"rank 0"}}',
     "other"),
    (_CALL, "slice"),
    # a call whose role comes from its process, named further down
    ('{"ph":"X","pid":4,"tid":2,"cat":"call","name":"gen","ts":"11.000","dur":"2.000",'
     '"args":{"rank":1,"step":1,"method":"gen","flow":2}}', "slice"),
    ('{"ph":"X","pid":2,"cat":"call","name":"更新","ts":"14.500","dur":"1.000","args":{"rank":0,"who":"crític",'
     '"l":[1,2.5,{"x":null,"y":[]}],"b":false}}', "slice"),
    ('{"ph":"X","pid":2,"cat":"call","name":"no dur","ts":"14.600","args":null}', "slice"),
    ('{"ph":"X","cat":"call","ts":"14.700","dur":"1.000"}', "other"),   # no name (nor pid or args)
    ('{"ph":"X","pid":2,"cat":"call","name":"","ts":"14.710","dur":"1.000"}', "slice"),   # no pid or args
    # fields of types rldbg does not write: the Python counts and skips them (report_trace._bad_field)
    ('{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.720","dur":"1.000","args":{"rank":"1"}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.721","dur":"1.000","args":{"rank":true}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.722","dur":"1.000","args":{"step":1.5}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.723","dur":"1.000","args":{"method":["u"]}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.724","dur":"1.000","args":{"flow":1.5}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"u","ts":"14.725","dur":"1.000","args":{"mem_after":"5"}}', "other"),
    ('{"ph":"X","pid":2,"cat":"transition","name":"t","ts":"14.726","dur":"1.000","args":{"frees":"params"}}',
     "other"),
    ('{"ph":"X","pid":2,"cat":"transition","name":"t","ts":"14.727","dur":"1.000","args":{"loads":["a",1]}}',
     "other"),
    ('{"ph":"X","pid":2,"cat":"transition","name":"t","ts":"14.728","dur":"1.000",'
     '"args":{"frees":[],"loads":null,"mem_before":null,"mem_after":1.5,"step":null,"method":null,"flow":"f"}}',
     "slice"),
    ('{"ph":"X","pid":2,"cat":"call","name":"role 5","ts":"14.750","dur":"1.000","args":{"role":5}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"role null","ts":"14.760","dur":"1.000","args":{"role":null}}',
     "other"),
    ('{"ph":"M","pid":7,"name":"process_name","args":{"name":7}}', "other"),   # names nothing
    ('{"ph":"X","pid":2,"cat":"call","name":"dur a number","ts":"14.800","dur":1}', "other"),
    ('{"ph":"X","pid":"2","cat":"call","name":"pid text","ts":"14.900","dur":"1.000"}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"nested twice","ts":"14.950","dur":"1.000",'
     '"args":{"rank":0,"m":{"a":1,"a":2}}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"19 digits","ts":"14.960","dur":"1.000",'
     '"args":{"rank":0,"big":1700000000000000000}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"n","ts":12,"dur":1.5,"args":{"rank":0}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"two decimals","ts":"13.50","dur":"1","args":{"rank":0}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"更新","ts":"14.000","dur":"1.000","args":{"rank":0,"note":"a\\"b\\n"}}',
     "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"\\u00e9","ts":"15.000","dur":"1.000","args":{"rank":0}}', "other"),
    ('{"ph":"X","pid":3,"tid":1,"cat":"transition","name":"offload","ts":"16.000","dur":"1.000",'
     '"args":{"role":"actor","rank":0,"step":1,"frees":["params"],"mem_before":10,"mem_after":5}}', "slice"),
    ('{"ph":"X","pid":1,"tid":1,"cat":"step","name":"step 1","ts":"0.000","dur":"100.000",'
     '"args":{"role":"driver","rank":0,"step":1}}', "slice"),
    ('{"ph":"X","pid":1,"tid":1,"cat":"driver_call","name":"update","ts":"9.000","dur":"7.000",'
     '"args":{"role":"driver","rank":0,"step":1,"mode":"DP_COMPUTE_PROTO"}}', "slice"),
    ('{"ph":"X","pid":1,"tid":1,"cat":"driver_call","name":"dispatch","ts":"9.000","dur":"1.000",'
     '"args":{"role":"driver","rank":0,"step":1}}', "skip"),
    ('{"ph":"X","pid":1,"cat":"driver_call","name":"send","ts":"9.500","dur":"1.000","args":null}', "skip"),
    ('{"ph":"X","pid":1,"cat":"driver_call","name":"wait","ts":"9.600","dur":"1.000"}', "skip"),
    ('{"ph":"X","pid":1,"cat":"driver_call","name":"recv","ts":"9.700","dur":"1.000","args":{"x":{"mode":1}}}',
     "skip"),   # "mode" only in a nested object
    ('{"ph":"X","pid":1,"cat":"driver_call","name":"m\\u006fde","ts":"9.800","dur":"1.000",'
     '"args":{"m\\u006fde":1}}', "other"),   # "mode" spelled with an escape: the Python's
    ('{"ph":"X","pid":2,"tid":1,"cat":"user","name":"forward","ts":"10.010","dur":"1.000",'
     '"args":{"role":"actor","rank":0,"step":1,"method":"update"}}', "skip"),
    ('{"ph":"X","pid":2,"cat":"user","name":"nested","ts":"10.020","dur":"1.000",'
     '"args":{"a":[1,[2,{"b":null}],"x"],"m":{},"f":-0.5,"t":true}}', "skip"),
    ('{"ph":"X","pid":2,"cat":"user","name":"exp","ts":"10.030","dur":"1.000","args":{"e":1e5}}', "skip"),
    ('{"ph":"X","pid":2,"cat":"user","name":"exp-3","ts":"10.036","dur":"1.000","args":{"e":1E-300}}', "other"),
    ('{"ph":"X","pid":2,"cat":"user","name":"big","ts":"10.040","dur":"1.000",'
     '"args":{"i":123456789012345678901234}}', "other"),
    ('{"ph":"X","pid":2,"cat":"user","name":"ünïcode ✓","ts":"10.050","dur":"1.000","args":{"s":"😀"}}', "skip"),
    ('{"ph":"X","pid":2,"name":"no cat","ts":"10.060","dur":"1.000"}', "skip"),
    ('{"ph":"X","pid":2,"cat":1,"name":"cat a number","ts":"10.070","dur":"1.000"}', "other"),
    ('{"ph":"X","pid":2,"cat":["call"],"name":"cat a list","ts":"10.080","dur":"1.000"}', "other"),
    ('{"ph":"X","pid":2,"cat":"user","name":"dur 0","ts":"10.090"}', "skip"),
    (' { "ph" : "X" , "pid" : 2 , "cat" : "call" , "name" : "spaced" , "ts" : "17.000" , "dur" : "1.000" ,'
     ' "args" : { "rank" : 0 , "l" : [ 1 , { } ] } } ', "slice"),
    ('{"ph":"X","ph":"i","pid":2,"cat":"user","name":"ph twice","ts":"18.000","dur":"1.000"}', "other"),
    ('{"ph":"X","pid":2,"cat":"user","cat":"call","name":"cat twice","ts":"18.500","dur":"1.000",'
     '"args":{"rank":0}}', "other"),
    ('{"ph":"i","s":"g","pid":1,"tid":1,"name":"rldbg trace start","ts":"0.000",'
     '"args":{"origin_unix_ns":1700000000000000000,"clock":{"aligned":true,"max_uncertainty_ns":1000,'
     '"processes":{}}}}', "other"),
    ('{"ph":"i","s":"t","pid":1,"tid":1,"name":"rldbg trace losses","ts":"99.000",'
     '"args":{"total_lost":3,"by_cause":{"buffer full":3}}}', "other"),
    (json.dumps({"ph": "i", "s": "t", "pid": 2, "tid": 1, "cat": "sentinel", "name": sentinel.EVENT,
                 "ts": "19.000", "args": {"role": "actor", "rank": 0, "step": 1, "where": "loss"}},
                separators=(",", ":")), "other"),
    ('{"ph":"i","s":"t","pid":2,"tid":1,"cat":"user","name":"mark","ts":"20.000","args":{"role":"actor"}}', "skip"),
    ('{"ph":"I","pid":2,"name":"mark","ts":"20.500"}', "skip"),
    ('{"ph":"i","pid":2,"ts":"20.600"}', "skip"),
    ('{"ph":"i","pid":2,"name":7,"ts":"20.700"}', "other"),
    ('{"ph":"C","pid":2,"name":"rank 0 memory","ts":"21.000","args":{"rss":1073741824,"device_used":5}}', "file"),
    ('{"ph":"C","pid":2,"name":"rank 0 memory","ts":"20.000","args":{"rss":1073741000}}', "file"),
    ('{"ph":"C","pid":2,"name":"rank 0 ledger","ts":"21.000","args":{"params":2654720}}', "file"),
    ('{"ph":"C","pid":3,"name":"rank 0 ledger","ts":"21.500","args":{"grads":0.5,"optimizer":-3}}', "file"),
    ('{"ph":"C","pid":3,"name":"rank 0 ledger","ts":"21.600","args":{"grads":1,'
     '"kv_cache":null,"w":true,"tag":"x"}}', "other"),   # samples that are not numbers: the Python's
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":22,"args":{"rss":7}}', "other"),        # ts a number
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"22.50","args":{"rss":8}}', "other"),   # not "123.456"
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"23.000","args":{"rss":{"x":1}}}', "other"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"23.500","args":{"rss":1,"rss":2}}', "other"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"24.000","args":{"rss":1e3,"f":-2.7939677238464355e-09}}',
     "file"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"24.200","args":{"rss":1e+100}}', "other"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"24.500","args":{"rss":"\\u0031"}}', "other"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"25.000","args":{' +
     ",".join(f'"s{i}":{i}' for i in range(17)) + "}}", "other"),   # more series than the C reads
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"25.500","args":{' +
     ",".join(f'"s{i}":{i}' for i in range(16)) + "}}", "file"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"26.000","args":{}}', "skip"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"26.500","args":null}', "skip"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"27.000"}', "skip"),
    ('{"ph":"C","pid":"2","name":"rank 1 memory","ts":"27.500","args":{"rss":9}}', "other"),
    ('{"ph":"C","name":"rank 1 memory","ts":"28.000","args":{"rss":9}}', "other"),
    ('{"ph":"C","pid":2,"name":["rank 0 memory"],"ts":"28.500","args":{"rss":2}}', "other"),
    ('{"ph":"C","pid":2,"name":"rank 0 memory\\n","ts":"28.700","args":{"rss":3}}', "other"),
    ('{"ph":"C","pid":4,"name":"rank 1 memory","ts":"29.000","args":{"rss":11}}', "file"),
    ('{"ph":"C","pid":9,"name":"rank 0 memory","ts":"29.500","args":{"rss":12}}', "file"),   # never named
    ('{"ph":"C","pid":2,"name":"x","ts":"30.000","args":{"v":1}}', "file"),   # a user counter: dropped
    ('{"ph":"C","pid":1,"name":"rldbg dropped events","ts":"31.000","args":{"total":4}}', "file"),
    ('{"ph":"C","pid":1,"name":"rldbg dropped events","ts":"30.000","args":{"total":2}}', "file"),
    ('{"ph":"C","pid":2,"name":"rank 0 memory","ts":"-0.001","args":{"rss":-1}}', "file"),
    ('{"ph":"X","ts":"soon","name":"malformed"}', "other"),
    ('{"ts":"1.000"}', "other"),
    ('5', "other"),
    ('"text"', "other"),
    ('{"ph":"C","ts":"1.000","args":[1]}', "other"),
    ('{"ph":1,"ts":"1.000"}', "other"),
    ('{"ph":"X","ts":"1.000","dur":"long"}', "other"),
    ('{"ph":"Z","anything":1}', "other"),
    ('{"ph":"XX","ts":"1.000"}', "other"),
    ('{"ph":"s","pid":2,"id":1,"ts":"1.000"}', "other"),
    ('{"ph":"B","pid":2,"name":"b","ts":"2.000"}\r', "other"),
    ('{"ph":"X","pid":2,"cat":"user","name":"a","ts":"3.000","dur":"1.000"},'
     '{"ph":"X","pid":2,"cat":"user","name":"b","ts":"4.000","dur":"1.000"}', "other"),   # two on a line
    ('{"ph":"M","pid":4,"name":"process_name","args":{"name":"rollout"}}', "other"),
    ('', "skip"),
]


def _text(lines) -> bytes:
    return ("[\n" + ",\n".join(lines) + "\n]\n").encode()


def _facts(t: Trace) -> dict:
    return {"calls": t.calls, "transitions": t.transitions, "driver_calls": t.driver_calls, "steps": t.steps,
            "mem": dict(t.mem), "ledger": dict(t.ledger), "meta": t.meta, "instants": t.instants,
            "dropped": t.dropped_total, "names": t.names, "notes": t.notes}


def _read(path, monkeypatch, c: bool, jobs: int = 1, whole: bool = True) -> Trace:
    """The Trace read with or without the C; whole=False: the tolerant whole-file reader made to
    fail, to show the pieces were read."""
    with monkeypatch.context() as m:
        if not c:
            m.setattr(fastpath, "LINES", None)
        if not whole:
            def refuse(*a, **k):
                raise AssertionError("read whole")
            m.setattr(load_pieces, "_load", refuse)
        return read_trace(str(path), jobs=jobs)


needs_c = pytest.mark.skipif(C is None, reason="rldbg/trace/_lines_c.c not built")


@needs_c
@pytest.mark.parametrize("piece", [1, 300, 1 << 18])
def test_every_kind_of_line_leaves_the_trace_the_python_leaves(tmp_path, monkeypatch, piece):
    path = tmp_path / "t.json"
    path.write_bytes(_text([line for line, _ in LINES]))
    monkeypatch.setattr(load_pieces, "_PIECE", piece)
    want = _facts(_read(path, monkeypatch, c=False, whole=False))
    assert want["notes"] == ["7 malformed event(s) skipped (missing or bad ph/ts/dur/args)",
                             "9 rldbg slice(s) skipped for a field of a type rldbg does not write "
                             "(flow 1, frees 1, loads 1, mem_after 1, method 1, name 1, rank 2, step 1)",
                             "5 counter sample(s) skipped: a value that is not a number"]
    assert want["mem"][("actor", 0, "rss")][:2] == [(-1, -1), (20000, 1073741000)]
    assert want["dropped"] == 4 and want["calls"][1]["role"] == "rollout"
    calls = []
    real = C.scan
    monkeypatch.setattr(fastpath, "LINES", type("Counting", (), {"scan": staticmethod(
        lambda *a: calls.append(1) or real(*a)), "in_order": staticmethod(C.in_order)}))
    assert _facts(_read(path, monkeypatch, c=True, whole=False)) == want
    assert calls   # the C did read it


@needs_c
def test_what_the_c_answers_itself_line_by_line():
    """Each line alone: skipped, filed as counter samples, or handed back verbatim (and then only
    it): a C that handed everything back would be correct, and slow, and fail here."""
    for line, want in LINES:
        raw = _text([line])
        t = Trace.empty()
        got = C.scan(raw, 2, raw.rfind(b"]"), True, *t.scan_rules())
        assert got is not None, line
        filed = sum(len(v) for s in t.counters.values() if s for v in s.values())
        made = t.calls + t.transitions + t.driver_calls + t.steps
        assert len(made) == (want == "slice"), line
        if want == "slice":
            whole = Trace.empty()
            whole.add({"X": [orjson.loads(line)]})
            assert made == whole.calls + whole.transitions + whole.driver_calls + whole.steps, line
            assert t._unnamed == whole._unnamed and got == b"", line
        elif want == "other":
            assert got and not filed, line
            back = orjson.loads(got)
            events = [e for es in back.values() for e in es] if type(back) is dict else back
            assert events == orjson.loads(b"[" + line.strip().encode() + b"]"), line
        else:
            assert got == b"", line
            assert bool(filed) == (want == "file") or line.startswith('{"ph":"C","pid":2,"name":"x"'), line


def _line(start: str) -> str:
    return next(line for line, _ in LINES if line.startswith(start))


@needs_c
def test_valid_lines_come_back_split_by_phase_and_in_file_order():
    """A range's kept slices are all made here or all handed back (in file order among the rest):
    one with a numeric time makes them all the Python's."""
    numeric = _line('{"ph":"X","pid":2,"cat":"call","name":"n"')
    start = _line('{"ph":"i","s":"g"')
    assert '"origin_unix_ns":1700000000000000000' in start   # 19 digits: an integer to orjson
    lines = [_CALL, LINES[0][0], numeric, start]
    raw = _text(lines)
    t = Trace.empty()
    got = orjson.loads(C.scan(raw, 2, raw.rfind(b"]"), True, *t.scan_rules()))
    assert list(got) == ["X", "M", "i"] and [e["ts"] for e in got["X"]] == ["10.000", 12]
    assert t.calls == []
    raw = _text(lines + ['{"ph":"X","ts":"soon"}'])   # one not valid: all in one array, in order
    got = orjson.loads(C.scan(raw, 2, raw.rfind(b"]"), True, *Trace.empty().scan_rules()))
    assert type(got) is list and got[0]["ts"] == "10.000" and got[-1]["ts"] == "soon"
    raw = _text(lines[:2] + [start])   # every kept slice made here: the rest come back
    got = orjson.loads(C.scan(raw, 2, raw.rfind(b"]"), True, *t.scan_rules()))
    assert list(got) == ["M", "i"] and [c["ts"] for c in t.calls] == [10000]


@needs_c
@pytest.mark.parametrize("text", [
    '[\n{"ph":"X","ts":"1.000"}\n{"ph":"X","ts":"2.000"}\n]',            # a comma missing
    '[\n{"ph":"X","ts":"1.000"},\n{"ph":"X",\n"ts":"2.000"}\n]',         # an event over two lines
    '[\n{"ph":"X","ts":"1.000"},\n{"ph":"X","ts":"2.000"}},\n{"ph":"X","ts":"3.000"}\n]',   # a brace too many
    '[\n{"ph":"X","ts":"1.000",},\n{"ph":"X","ts":"3.000"}\n]',          # a comma inside
    '[\n{"ph":"X","ts":"1.0\x01"},\n{"ph":"X","ts":"3.000"}\n]',          # a control character
    '[\n{"ph":"X","ts":NaN},\n{"ph":"X","ts":"3.000"}\n]',
    '[\n{"ph":"X","ts":01},\n{"ph":"X","ts":"3.000"}\n]',
    '[\n{"ph":"X","name":"\\x"},\n{"ph":"X","ts":"3.000"}\n]',            # no such escape
])
def test_a_range_not_one_event_per_line_is_refused(text):
    raw = text.encode()
    assert C.scan(raw, 2, raw.rfind(b"]"), True, *Trace.empty().scan_rules()) is None


@needs_c
def test_invalid_utf8_is_refused_as_orjson_refuses_it():
    for bad in (b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\xff"):
        raw = b'[\n{"ph":"X","cat":"user","name":"' + bad + b'","ts":"1.000"}\n]'
        assert C.scan(raw, 2, raw.rfind(b"]"), True, *Trace.empty().scan_rules()) is None
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(raw)


@needs_c
def test_files_the_tolerant_reader_takes_are_read_the_same(tmp_path, monkeypatch):
    """Pretty-printed, a missing comma, a file cut short, a number orjson refuses (the C hands its
    line back, orjson refuses the piece): the tolerant reader's, with its notes."""
    good = [line for line, _ in LINES[:12]]
    refused = ('{"ph":"X","pid":2,"cat":"user","name":"exp3","ts":"10.035","dur":"1.000","args":{"e":1e400}}')
    raw = _text([refused])
    assert C.scan(raw, 2, raw.rfind(b"]"), True, *Trace.empty().scan_rules()) == b"[" + refused.encode() + b"]"
    for name, text in [("pretty", json.dumps([json.loads(x) for x in good], indent=1).encode()),
                       ("comma", _text(good).replace(b"},\n", b"}\n", 1)),
                       ("refused", _text(good + [refused])),
                       ("cut", _text(good)[:-60])]:
        path = tmp_path / f"{name}.json"
        path.write_bytes(text)
        monkeypatch.setattr(load_pieces, "_PIECE", 100)
        want = _facts(_read(path, monkeypatch, c=False))
        assert _facts(_read(path, monkeypatch, c=True)) == want, name
    assert want["notes"] and want["notes"][0].startswith("truncated")


@needs_c
def test_a_trace_read_by_two_processes_is_the_same(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_bytes(_text([line for line, _ in LINES if line] * 20))
    monkeypatch.setattr(load_pieces, "_PIECE", 400)
    monkeypatch.setattr(load_pieces, "_SIDE_BY_SIDE", 0)
    want = _facts(_read(path, monkeypatch, c=False, whole=False))
    assert _facts(_read(path, monkeypatch, c=True, jobs=2, whole=False)) == want


@needs_c
def test_counter_values_are_the_values_orjson_reads():
    rnd = random.Random(7)
    values = [rnd.uniform(-1e6, 1e6) for _ in range(300)] + [rnd.random() * 10 ** -rnd.randint(0, 12)
                                                             for _ in range(300)]
    texts = [repr(v) for v in values] + ["0.1", "-0.0", "123456789012345678", "-999999999999999999", "0",
                                         "1.7976931348623157", "1E5", "2.5e+07", "-4e-99", "9.999999999999999e99"]
    lines = [f'{{"ph":"C","pid":2,"name":"rank 0 memory","ts":"{i}.000","args":{{"v":{v}}}}}'
             for i, v in enumerate(texts)]
    raw = _text(lines)
    t = Trace.empty()
    assert C.scan(raw, 2, raw.rfind(b"]"), True, *t.scan_rules()) == b""
    got = [v for _, v in t.counters[(2, "rank 0 memory")]["v"]]
    want = [e["args"]["v"] for e in orjson.loads(raw)]
    assert len(got) == len(texts) > 600 and sum("e" in t for t in texts) > 100
    assert [(type(v), v, str(v)) for v in got] == [(type(v), v, str(v)) for v in want]


def test_the_switch_and_the_cli(tmp_path):
    """Built where the suite runs; RLDBG_PURE_PYTHON=1 turns it off; `rldbg report` prints the
    same report either way, as text and as JSON."""
    path = tmp_path / "t.json"
    path.write_bytes(_text([line for line, _ in LINES if line] * 50))
    env = {k: v for k, v in os.environ.items() if k != fastpath.PURE_PYTHON}
    code = "from rldbg import fastpath; print(fastpath.READ_IMPLEMENTATION)"
    outs = []
    for pure, want in (("", "c"), ("1", "python")):
        e = dict(env, RLDBG_PURE_PYTHON=pure)
        got = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, check=True)
        assert got.stdout.strip() == want
        for extra in ([], ["--json"]):
            r = subprocess.run([RLDBG, "report", str(path), *extra], env=e, capture_output=True, text=True,
                               timeout=120)
            assert r.returncode == 3, r.stderr   # its malformed events make it a damaged trace
            outs.append(r.stdout)
    assert outs[0] == outs[2] and outs[1] == outs[3]
    assert "malformed" in outs[0] and json.loads(outs[1])["memory_peaks"]


@needs_c
def test_an_exported_run_is_read_by_the_c_and_the_same(tmp_path, monkeypatch):
    """A trace as `rldbg export` writes it: every kept slice made and every counter sample filed
    in C (the Python's add() sees no slice and no counter), and the Trace the Python makes."""
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
                                 {"group": "actor", "n": [1, 2.5, None]}),
                  ev.slice_event("user", "forward", t + 10, 1000, "actor", rank, i // 100, "update_actor", None, {}),
                  ev.memory_event(t, "actor", rank, None, None, {"rss": (1 << 30) + i}),
                  ev.instant_event("user", "mark", t, "actor", rank, None, None, {})]
    w.write({"pid": 1, "host": "h", "dropped": 0, "events": batch})
    w.close()
    out = str(tmp_path / "run.json")
    export_spill(spill, out)
    monkeypatch.setattr(load_pieces, "_PIECE", 4096)
    want = _facts(_read(out, monkeypatch, c=False, whole=False))
    assert len(want["calls"]) == 3000 and len(want["steps"]) == 30 and want["mem"]
    seen = []
    real_add = Trace.add
    monkeypatch.setattr(Trace, "add", lambda self, by_ph: seen.extend(by_ph.get("X", []) + by_ph.get("C", []))
                        or real_add(self, by_ph))
    assert _facts(_read(out, monkeypatch, c=True, whole=False)) == want
    assert seen == []


@needs_c
def test_in_order_says_whether_a_sort_would_change_the_list():
    """finish() skips the sort of a series already in order: exactly when sorting would leave it."""
    rnd = random.Random(3)
    cases = [[], [(1, 5)], [(1, 5), (2, 1)], [(2, 1), (1, 5)], [(1, 5), (1, 5)], [(1, 5), (1, 4)], [(1, 4), (1, 5)],
             [(1 << 70, 1), (1 << 71, 0)], [(1 << 71, 1), (1 << 70, 0)], [(-3, 1), (-2, 0)], [(1.5, 1), (2, 0)],
             [(2, 0), (1.5, 1)], [(1, None), (2, "x")], [(1, "x"), (1, "y")]]
    for _ in range(300):
        n = rnd.randint(0, 6)
        cases.append([(rnd.randint(0, 3), rnd.randint(0, 3)) for _ in range(n)])
    for samples in cases:
        assert C.in_order(samples) == (sorted(samples) == samples), samples
    # a tie whose values do not compare: not in order as far as it can tell (the sort then raises)
    assert C.in_order([(1, None), (1, "x")]) is False
    with pytest.raises(TypeError):
        sorted([(1, None), (1, "x")])


@needs_c
def test_names_that_share_a_cache_slot_stay_apart(tmp_path, monkeypatch):
    """Thousands of distinct method names, roles and keys of one length: the C's cache of short
    strings (1,024 slots) is shared by many of them, and each record keeps its own."""
    lines = [f'{{"ph":"X","pid":2,"cat":"call","name":"m{i:04d}","ts":"{i}.000","dur":"1.000",'
             f'"args":{{"role":"r{i % 3000:04d}","rank":0,"method":"m{i:04d}","k{i % 2000:04d}":"v{i:04d}"}}}}'
             for i in range(6000)]
    path = tmp_path / "t.json"
    path.write_bytes(_text(lines))
    want = _facts(_read(path, monkeypatch, c=False, whole=False))
    got = _facts(_read(path, monkeypatch, c=True, whole=False))
    assert got == want and len({c["method"] for c in got["calls"]}) == 6000
