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
# (line, what the C does with it alone: "skip", "file" (a counter sample filed) or "other")
LINES = [
    ('{"ph":"M","pid":2,"name":"process_name","args":{"name":"actor"}}', "other"),
    ('{"ph":"M","pid":3,"name":"process_name","args":{"name":"crític"}}', "other"),
    ('{"ph":"M","pid":2,"tid":1,"name":"thread_name","args":{"pid":1,"node_id":"n","node_ip":"","name":"rank 0"}}',
     "other"),
    (_CALL, "other"),
    # a call whose role comes from its process, named further down
    ('{"ph":"X","pid":4,"tid":2,"cat":"call","name":"gen","ts":"11.000","dur":"2.000",'
     '"args":{"rank":1,"step":1,"method":"gen","flow":2}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"n","ts":12,"dur":1.5,"args":{"rank":0}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"two decimals","ts":"13.50","dur":"1","args":{"rank":0}}', "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"更新","ts":"14.000","dur":"1.000","args":{"rank":0,"note":"a\\"b\\n"}}',
     "other"),
    ('{"ph":"X","pid":2,"cat":"call","name":"\\u00e9","ts":"15.000","dur":"1.000","args":{"rank":0}}', "other"),
    ('{"ph":"X","pid":3,"tid":1,"cat":"transition","name":"offload","ts":"16.000","dur":"1.000",'
     '"args":{"role":"actor","rank":0,"step":1,"frees":["params"],"mem_before":10,"mem_after":5}}', "other"),
    ('{"ph":"X","pid":1,"tid":1,"cat":"step","name":"step 1","ts":"0.000","dur":"100.000",'
     '"args":{"role":"driver","rank":0,"step":1}}', "other"),
    ('{"ph":"X","pid":1,"tid":1,"cat":"driver_call","name":"update","ts":"9.000","dur":"7.000",'
     '"args":{"role":"driver","rank":0,"step":1,"mode":"DP_COMPUTE_PROTO"}}', "other"),
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
    ('{"ph":"X","pid":2,"cat":"user","name":"exp","ts":"10.030","dur":"1.000","args":{"e":1e5}}', "other"),
    ('{"ph":"X","pid":2,"cat":"user","name":"big","ts":"10.040","dur":"1.000",'
     '"args":{"i":123456789012345678901234}}', "other"),
    ('{"ph":"X","pid":2,"cat":"user","name":"ünïcode ✓","ts":"10.050","dur":"1.000","args":{"s":"😀"}}', "skip"),
    ('{"ph":"X","pid":2,"name":"no cat","ts":"10.060","dur":"1.000"}', "skip"),
    ('{"ph":"X","pid":2,"cat":1,"name":"cat a number","ts":"10.070","dur":"1.000"}', "other"),
    ('{"ph":"X","pid":2,"cat":["call"],"name":"cat a list","ts":"10.080","dur":"1.000"}', "other"),
    ('{"ph":"X","pid":2,"cat":"user","name":"dur 0","ts":"10.090"}', "skip"),
    (' { "ph" : "X" , "pid" : 2 , "cat" : "call" , "name" : "spaced" , "ts" : "17.000" , "dur" : "1.000" ,'
     ' "args" : { "rank" : 0 } } ', "other"),
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
    ('{"ph":"C","pid":3,"name":"rank 0 ledger","ts":"21.500","args":{"grads":0.5,"optimizer":-3,'
     '"kv_cache":null,"w":true,"tag":"x"}}', "file"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":22,"args":{"rss":7}}', "other"),        # ts a number
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"22.50","args":{"rss":8}}', "other"),   # not "123.456"
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"23.000","args":{"rss":{"x":1}}}', "other"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"23.500","args":{"rss":1,"rss":2}}', "other"),
    ('{"ph":"C","pid":2,"name":"rank 1 memory","ts":"24.000","args":{"rss":1e3}}', "other"),
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


def _read(path, monkeypatch, c: bool, jobs: int = 1) -> Trace:
    with monkeypatch.context() as m:
        if not c:
            m.setattr(fastpath, "LINES", None)
        return read_trace(str(path), jobs=jobs)


needs_c = pytest.mark.skipif(C is None, reason="rldbg/trace/_lines_c.c not built")


@needs_c
@pytest.mark.parametrize("piece", [1, 300, 1 << 18])
def test_every_kind_of_line_leaves_the_trace_the_python_leaves(tmp_path, monkeypatch, piece):
    path = tmp_path / "t.json"
    path.write_bytes(_text([line for line, _ in LINES]))
    monkeypatch.setattr(load_pieces, "_PIECE", piece)
    want = _facts(_read(path, monkeypatch, c=False))
    assert want["notes"] == ["7 malformed event(s) skipped (missing or bad ph/ts/dur/args)"]
    assert want["mem"][("actor", 0, "rss")][:2] == [(-1, -1), (20000, 1073741000)]
    assert want["dropped"] == 4 and want["calls"][1]["role"] == "rollout"
    calls = []
    real = C.scan
    monkeypatch.setattr(fastpath, "LINES", type("Counting", (), {"scan": staticmethod(
        lambda *a: calls.append(1) or real(*a))}))
    assert _facts(_read(path, monkeypatch, c=True)) == want
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
        if want == "other":
            assert got and not filed, line
            back = orjson.loads(got)
            events = [e for es in back.values() for e in es] if type(back) is dict else back
            assert events == orjson.loads(b"[" + line.strip().encode() + b"]"), line
        else:
            assert got == b"", line
            assert bool(filed) == (want == "file") or line.startswith('{"ph":"C","pid":2,"name":"x"'), line


@needs_c
def test_valid_lines_come_back_split_by_phase_and_in_file_order():
    lines = [_CALL, LINES[0][0], _CALL.replace("10.000", "11.000"), LINES[29][0]]   # the trace start's
    assert '"origin_unix_ns":1700000000000000000' in lines[-1]   # 19 digits: an integer to orjson
    raw = _text(lines)
    got = orjson.loads(C.scan(raw, 2, raw.rfind(b"]"), True, *Trace.empty().scan_rules()))
    assert list(got) == ["X", "M", "i"] and [e["ts"] for e in got["X"]] == ["10.000", "11.000"]
    raw = _text(lines + ['{"ph":"X","ts":"soon"}'])   # one not valid: all in one array, in order
    got = orjson.loads(C.scan(raw, 2, raw.rfind(b"]"), True, *Trace.empty().scan_rules()))
    assert type(got) is list and got[0]["ts"] == "10.000" and got[-1]["ts"] == "soon"


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
    """Pretty-printed, a missing comma, a file cut short: the tolerant reader's, with its notes."""
    good = [line for line, _ in LINES[:12]]
    for name, text in [("pretty", json.dumps([json.loads(x) for x in good], indent=1).encode()),
                       ("comma", _text(good).replace(b"},\n", b"}\n", 1)),
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
    path.write_bytes(_text([line for line, _ in LINES] * 20))
    monkeypatch.setattr(load_pieces, "_PIECE", 400)
    monkeypatch.setattr(load_pieces, "_SIDE_BY_SIDE", 0)
    want = _facts(_read(path, monkeypatch, c=False))
    assert _facts(_read(path, monkeypatch, c=True, jobs=2)) == want


@needs_c
def test_counter_values_are_the_values_orjson_reads():
    rnd = random.Random(7)
    values = [rnd.uniform(-1e6, 1e6) for _ in range(300)] + [rnd.random() * 10 ** -rnd.randint(0, 12)
                                                             for _ in range(300)]
    texts = [repr(v) for v in values if "e" not in repr(v)] + ["0.1", "-0.0", "123456789012345678",
                                                               "-999999999999999999", "0", "1.7976931348623157"]
    lines = [f'{{"ph":"C","pid":2,"name":"rank 0 memory","ts":"{i}.000","args":{{"v":{v}}}}}'
             for i, v in enumerate(texts)]
    raw = _text(lines)
    t = Trace.empty()
    assert C.scan(raw, 2, raw.rfind(b"]"), True, *t.scan_rules()) == b""
    got = [v for _, v in t.counters[(2, "rank 0 memory")]["v"]]
    want = [e["args"]["v"] for e in orjson.loads(raw)]
    assert len(got) == len(texts) > 300
    assert [(type(v), v, str(v)) for v in got] == [(type(v), v, str(v)) for v in want]


def test_the_switch_and_the_cli(tmp_path):
    """Built where the suite runs; RLDBG_PURE_PYTHON=1 turns it off; `rldbg report` prints the
    same report either way, as text and as JSON."""
    path = tmp_path / "t.json"
    path.write_bytes(_text([line for line, _ in LINES] * 50))
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
