"""The exporter's C (rldbg/trace/_chrome_c.c) against its Python: built and in use where the suite
runs, it writes the very file the Python writes over spills made to reach each of its branches
(args of every JSON type, args that repeat layout keys, falsy and non-map args, times before the
origin and beyond 64 bits, bind ids, driver calls, unknown phases), leaves to the Python exactly the
events and batches it should, and a damaged spill is reported the same either way."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from rldbg import fastpath
from rldbg.trace import chrome_text, export
from rldbg.trace import events as ev
from rldbg.trace.export import export_spill
from rldbg.trace.spill import SpillWriter, encode_events

RLDBG = str(Path(sys.executable).with_name("rldbg"))
T0 = 1_000_000_000

C = fastpath.CHROME   # None only where the build failed: test_the_switch_and_the_cli_as_users_run_them says so

# Args a slice or counter may carry, each written by the C: every JSON type, the escapes json
# writes, floats as repr() writes them (exponents, NaN, -0.0), ints to the ends of 64 bits.
ODD_ARGS = [
    {"f": 0.1, "e": 1e-05, "big": 1e16, "neg": -0.0, "nan": math.nan, "inf": math.inf, "ninf": -math.inf},
    {"i": -(1 << 63), "u": (1 << 64) - 1, "z": 0, "t": True, "n": None},
    {"s": 'q"b\\n\n\t\r\b\f\x01\x1f\x7f é中😀\u2028', "k\"ey\n": "v"},
    {"nested": {"a": [1, [2, {"b": None}], "x"], "m": {}}, "l": [], "tup": (1, 2)},
    {f"k{i}": i for i in range(16)},   # the most keys the C writes itself (more: the Python)
]
# Args the C leaves to the Python, event by event (each one fallback).
FALLBACK_ARGS = [
    {"raw": b"\x00bytes"},                 # bytes: json's default=str
    {1: "int key"},                        # a non-string key
    {f"k{i}": i for i in range(17)},       # 17 keys: the C does not check so many for repeats
    [1, "two"],                            # not a map: kept whole under "value"
    "a string",
]


def _events(t: int) -> tuple[list, int]:
    """A rank's batch reaching every branch; returns it and how many of its events the C should
    hand to the Python."""
    evs, fallbacks = [], 0
    for k, a in enumerate(ODD_ARGS):
        evs.append(ev.slice_event("user", f"odd {k}", t + k, 1_500 + k, "actor", 1, 3, "update_actor", None, a))
        evs.append(ev.counter_event("user", f"c{k}", t + k, "actor", 1, 3, None, a))
        evs.append(ev.instant_event("user", f"i{k}", t + k, "actor", 1, 3, None, a))
    for a in FALLBACK_ARGS:
        evs.append(ev.slice_event("user", "fb", t, 10, "actor", 1, 3, "m", None, a))
        fallbacks += 1
    # Falsy args: the layout's args alone.
    for a in (None, {}, (), "", 0, 0.0, False):
        evs.append(ev.slice_event("user", "falsy", t, 7, "actor", 1, None, None, None, a))
        evs.append(ev.instant_event("user", "falsy", t, "actor", 1, None, None, a))
    # Args repeating layout keys: a slice's own win (the C merges); an instant's lose (the Python's).
    evs.append(ev.transition_event("offload", t, 20, "actor", 1, 3, "update_actor",
                                   {"role": "mine", "rank": 9, "method": "other", "frees": ("optimizer",), "x": 1}))
    evs.append(ev.slice_event("user", "has step", t, 20, "actor", 1, 3, "m", None, {"step": "mine"}))
    evs.append(ev.instant_event("user", "step start", t, "actor", 1, 4, None, {"step": 99}))
    fallbacks += 1
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
    return evs, fallbacks


def _write(tmp_path, name: str = "t.spill") -> tuple[str, int]:
    """A spill of two ranks and the driver, with calls joined by flows; returns it and how many
    events the C should hand to the Python."""
    spill = str(tmp_path / name)
    w = SpillWriter(spill, {"origin_ns": T0, "job_id": "j"})
    t, fallbacks = T0 + 5_000_000, 0
    for step in range(4):
        for rank in range(2):
            evs = [ev.slice_event("call", "update_actor", t + rank, 9_000, "actor", rank, step, "update_actor",
                                  step + 1, {"role": "actor", "rank": rank, "step": step, "flow": step + 1}),
                   ev.slice_event("call", "update_actor", t + rank, 9_000, "actor", rank, step, "update_actor",
                                  None, {"group": "actor"}),   # a call slice without a flow: no bind id
                   ev.slice_event("call", "odd flow", t, 9, "actor", rank, step, "m", 1.5, None),   # not an int: no arrow
                   ev.memory_event(t + 5, "actor", rank, step, "update_actor", {"rss": 1 << 30, "device_used": 0.5})]
            if step == 1 and rank == 1:
                odd, n = _events(t)
                evs += odd
                fallbacks += n
            w.write({"pid": 100 + rank, "host": "h", "node_id": f"node{rank}", "node_ip": "127.0.0.1",
                     "clock_offset_ns": 1_000 * rank, "clock_rtt_ns": 300, "dropped": 0, "events": evs})
        drv = [ev.driver_call_event("update_actor", t - 500, 20_000, step, "update_actor", step + 1,
                                    {"group": "actor", "mode": "DP_COMPUTE_PROTO", "world": 2, "status": "ok",
                                     "t_dispatched": t - 100, "shards": [{"rows": 8}, {"rows": 8}]}),
               ev.slice_event("step", f"step {step}", t - 1_000, 30_000, "driver", 0, step, None)]
        fallbacks += 1   # the driver call
        w.write({"pid": 10, "host": "h", "node_id": "node10", "node_ip": "127.0.0.1", "events": drv})
        t += 100_000
    w.close()
    return spill, fallbacks


def _python(monkeypatch):
    monkeypatch.setattr(export, "CHROME", None)


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("reread", [False, True], ids=["kept", "reread"])
def test_c_writes_the_file_the_python_writes(tmp_path, monkeypatch, jobs, reread):
    spill, _ = _write(tmp_path)
    if reread:   # pass 2 reads the spill again instead of pass 1's kept batches
        monkeypatch.setattr(export, "KEEP_DECODED", 3)
    c = export_spill(spill, str(tmp_path / "c.json"), jobs=jobs)
    with monkeypatch.context() as m:
        _python(m)
        py = export_spill(spill, str(tmp_path / "py.json"), jobs=jobs)
    assert c["written"] == py["written"] and c["events"] == py["events"] > 60
    assert (tmp_path / "c.json").read_bytes() == (tmp_path / "py.json").read_bytes()


def test_the_c_hands_the_python_only_what_it_should(tmp_path, monkeypatch):
    """Equal files could also come from a C that hands everything to the Python: count what it
    hands over (driver calls, bytes or int keys or 16 keys in args, an instant's args naming a
    layout key)."""
    spill, expected = _write(tmp_path)
    handed, real = [], chrome_text.Formatter._packed_fallback

    def counting(self, raw, off):
        handed.append(msgpack.unpackb(raw, use_list=False, raw=False, strict_map_key=False))
        return real(self, raw, off)
    monkeypatch.setattr(chrome_text.Formatter, "_packed_fallback", counting)
    export_spill(spill, str(tmp_path / "c.json"), jobs=1)
    assert len(handed) == expected == 10, sorted({e[2] for e in handed})


def test_the_switch_and_the_cli_as_users_run_them(tmp_path):
    """RLDBG_PURE_PYTHON=1 turns the C off; `rldbg export` writes the same file either way."""
    spill, _ = _write(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != fastpath.PURE_PYTHON}
    code = "from rldbg import fastpath; print(fastpath.EXPORT_IMPLEMENTATION)"
    for pure, want in (("", "c"), ("1", "python")):
        e = dict(env, RLDBG_PURE_PYTHON=pure)
        got = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, check=True)
        assert got.stdout.strip() == want
        out = tmp_path / f"cli{pure or 0}.json"
        r = subprocess.run([RLDBG, "export", spill, "-o", str(out), "--jobs", "2"], env=e, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    assert (tmp_path / "cli0.json").read_bytes() == (tmp_path / "cli1.json").read_bytes()


def _raw_spill(tmp_path, events_bytes: list[bytes]) -> str:
    spill = str(tmp_path / "raw.spill")
    w = SpillWriter(spill, {"origin_ns": T0, "job_id": "j"})
    good = encode_events([ev.slice_event("user", "ok", T0 + 10, 5, "actor", 0, 1, None, None, {"a": 1})])
    for eb in [good, *events_bytes, good]:
        w.write_raw({"pid": 7, "host": "h", "dropped": 0}, eb)
    w.close()
    return spill


def _arr(*items: bytes) -> bytes:
    return bytes((0x90 | len(items),)) + b"".join(items)


def _event_bytes(ph=b"\xa1X", ts=b"\xce\x3b\x9a\xca\x10", args=b"\xc0", cat=b"\xa4user", role=b"\xa5actor",
                 rank=b"\x00") -> bytes:
    """One packed event; fields given as msgpack bytes."""
    return bytes((0x9b,)) + ph + cat + b"\xa1n" + ts + b"\x05" + role + rank + b"\x01\xc0\xc0" + args


# Batches the C must not read (it answers None, the Python decodes them as before): each is
# either damage the Python names, or a value msgpack-python reads its own way.
REFUSED = {
    "surrogate in a string": _arr(_event_bytes(cat=b"\xa3\xed\xa0\x80")),
    "overlong utf-8": _arr(_event_bytes(role=b"\xa2\xc0\xaf")),
    "ext type in args": _arr(_event_bytes(args=b"\xd4\x01\x00")),
    "timestamp ext as ts": _arr(_event_bytes(ts=b"\xd6\xff\x00\x00\x00\x01")),
    "bool rank": _arr(_event_bytes(rank=b"\xc3")),
    "ten fields": _arr(b"\x9a" + _event_bytes()[1:-1]),
    "ph not a string": _arr(_event_bytes(ph=b"\x01")),
    "cut short": _arr(_event_bytes())[:-1],
    "trailing bytes": _arr(_event_bytes()) + b"\xc0",
    "map key a map": _arr(_event_bytes(args=b"\x81\x80\x01")),
    "count beyond the bytes": b"\xdd\xff\xff\xff\xff" + _event_bytes(),
    "ts beyond int64": _arr(_event_bytes(ts=b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff")),
    "unused byte 0xc1": _arr(_event_bytes(args=b"\xc1")),
    "not an array": b"\x81\xa1a\x01",
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_batches_the_c_does_not_read_go_to_the_python_with_the_same_damage(tmp_path, monkeypatch, what):
    eb = REFUSED[what]
    assert C.index_batch(eb) is None
    spill = _raw_spill(tmp_path, [eb])
    dmg_c, dmg_py = [], []
    export_spill(spill, str(tmp_path / "c.json"), jobs=1, damage=dmg_c)
    with monkeypatch.context() as m:
        _python(m)
        export_spill(spill, str(tmp_path / "py.json"), jobs=1, damage=dmg_py)
    assert dmg_c == dmg_py
    assert (tmp_path / "c.json").read_bytes() == (tmp_path / "py.json").read_bytes()


def test_a_repeated_key_is_the_pythons_to_write(tmp_path, monkeypatch):
    """msgpack may hold a map with a key twice (a dict keeps one): the C leaves it to the Python."""
    args = b"\x82\xa1a\x01\xa1a\x02"
    spill = _raw_spill(tmp_path, [_arr(_event_bytes(args=args), _event_bytes(ph=b"\xa1C", args=args))])
    handed, real = [], chrome_text.Formatter._packed_fallback
    monkeypatch.setattr(chrome_text.Formatter, "_packed_fallback",
                        lambda self, raw, off: handed.append(raw) or real(self, raw, off))
    export_spill(spill, str(tmp_path / "c.json"), jobs=1)
    assert len(handed) == 2
    with monkeypatch.context() as m:
        _python(m)
        export_spill(spill, str(tmp_path / "py.json"), jobs=1)
    assert (tmp_path / "c.json").read_bytes() == (tmp_path / "py.json").read_bytes()


def test_index_batch_learns_what_the_python_learns():
    evs = [ev.slice_event("call", "a", 50, 7, "actor", 1, 0, "m", 3, None),
           ev.slice_event("call", "b", 20, 1, "actor", 1, 0, "m", None, None),   # no flow: not a call end
           ev.instant_event("user", "x", 30, "critic", 0, 0, None, None),
           ev.driver_call_event("m", 10, 100, 0, "m", 3, {}),
           ev.driver_call_event("m", 10, 100, 0, "m", None, {}),
           ev.memory_event(40, "actor", 1, 0, None, {"rss": 1})]
    n, ts, rrs, calls, flows = C.index_batch(encode_events(evs))
    assert (n, ts, rrs, calls, flows) == (6, 10, [("actor", 1), ("critic", 0), ("driver", 0)],
                                          [(3, "actor", 1, 57)], [3])
    idx_c, idx_py = export._Index({}), export._Index({})
    idx_c.see_packed({"pid": 1, "host": "h"}, (n, ts, rrs, calls, flows))
    idx_py.see({"pid": 1, "host": "h"}, evs)
    assert (idx_c.n, idx_c.first, idx_c.roles, idx_c.ranks, idx_c.calls, idx_c.driver_flows) == \
           (idx_py.n, idx_py.first, idx_py.roles, idx_py.ranks, idx_py.calls, idx_py.driver_flows)
    assert C.index_batch(encode_events([])) == (0, 0, [], [], [])


def test_writer_errors_are_raised_not_swallowed(tmp_path):
    """A Formatter answering the wrong shape is a TypeError naming what it should answer; a
    write() that fails raises out of batch()."""
    spill, _ = _write(tmp_path)
    idx = export._index(spill)

    class Bad(chrome_text.Formatter):
        def _packed_args(self, key):
            return ((b"role", "not bytes", False),)
    w = C.Writer(Bad(idx), len(idx.slots))
    batch = encode_events([ev.slice_event("user", "a", T0, 1, "actor", 0, 1, None, None, None)])
    with pytest.raises(TypeError, match="_packed_args"):
        w.batch(batch, 0, lambda b: None)

    def full(b):
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError, match="No space"):
        C.Writer(chrome_text.Formatter(idx), len(idx.slots)).batch(batch, 0, full)


def test_a_batch_found_unreadable_midway_is_dropped_whole(tmp_path):
    """The C reads and checks each event as it writes it: one found unreadable after others were
    made drops the batch's text (write() is never called) and leaves it to the Python."""
    spill, _ = _write(tmp_path)
    idx = export._index(spill)
    good = encode_events([ev.slice_event("user", "a", T0, 1, "actor", 0, 1, None, None, {"k": 1})] * 3)
    w, wrote = C.Writer(chrome_text.Formatter(idx), len(idx.slots)), []
    for bad in (REFUSED["surrogate in a string"][1:], b"\xc1", _event_bytes()[:-1]):
        assert w.batch(b"\x94" + good[1:] + bad, 0, wrote.append) is None
    assert w.batch(good + b"\xc0", 0, wrote.append) is None   # bytes after the array
    assert wrote == [] and C.index_batch(b"\x94" + good[1:] + b"\xc1") is None
    assert w.batch(good, 0, wrote.append) == 3 and b"".join(wrote).count(b",\n") == 3
