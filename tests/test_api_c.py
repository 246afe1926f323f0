"""rldbg.span/instant/counter in C (rldbg/_api_c.c) against rldbg.api's Python: the C paths are
built and in use where the suite runs, record exactly the events Python records, fail the same
way, and keep held events out of the cyclic GC's reach where nothing can make a cycle."""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import time

import pytest

import rldbg
from rldbg import api
from rldbg.context import current
from rldbg.trace import runtime
from rldbg.trace.events import decode
from rldbg.trace.recorder import Recorder
from rldbg.trace.spill import decode_events, encode_events

T = 1_700_000_000_000_000_000


@pytest.fixture
def state(monkeypatch):
    """Tracing on into an in-process Recorder, on a clock that always reads T (dur 0), so that
    both implementations' events compare exactly."""
    st, ctx = runtime.STATE, current()
    saved = (st.on, st.looked_up, st.recorder, st.last_lookup)
    saved_ctx = (ctx.role, ctx.rank, ctx.step, ctx.method)
    st.on, st.looked_up, st.recorder, st.last_lookup = True, True, Recorder(1000), time.monotonic()
    api.set_clock(lambda: T)
    from rldbg import instrument
    monkeypatch.setattr(instrument, "_now", lambda: T)   # worker calls' own timestamps (Python in both)
    yield st
    api.set_clock(time.time_ns)
    st.on, st.looked_up, st.recorder, st.last_lookup = saved
    ctx.role, ctx.rank, ctx.step, ctx.method = saved_ctx


def _script(span, instant, counter):
    """The same calls through either implementation; returns what each call raised, in order."""
    raised = []
    ctx = current()
    ctx.role, ctx.rank, ctx.step, ctx.method = "actor", 1, 7, "update_actor"
    with span("outer"):
        with span("inner", n=3, name="kw named name"):
            instant("mark")
            instant("mark", acc=0.5, tags=["a"])
        counter("tokens", per_s=12.5, n=3, ok=True)
        counter("empty")
    try:
        with span("failing", k=1):
            raise KeyError("boom")
    except KeyError:
        raised.append("KeyError")

    @span("decorated", kind="fn")
    def work(x):
        return x * 2
    assert work(4) == 8
    ctx.role, ctx.rank, ctx.step, ctx.method = "critic", 0, None, None
    with span("plain"):
        pass
    for call in (lambda: span(""), lambda: span(3), lambda: span(), lambda: counter("c", v="high"),
                 lambda: counter("c", 1), lambda: instant(), lambda: instant("x", name="y")):
        try:
            call()
        except (TypeError, ValueError) as e:
            raised.append(f"{type(e).__name__}: {e}")
    instant(name="by keyword", v=1)
    return raised


def _held(rec) -> list:
    """The recorder's events as tuples (C holds most of them packed: events.decode reads both)."""
    return [tuple(decode(e)) for e in rec.buf]


def test_c_records_and_raises_exactly_what_python_does(state):
    c_raised = _script(api.span, api.instant, api.counter)
    c_events = _held(state.recorder)
    c_shipped = decode_events(encode_events(list(state.recorder.buf)))
    state.recorder = Recorder(1000)
    py_raised = _script(api.py_span, api.py_instant, api.py_counter)
    py_events = _held(state.recorder)
    py_shipped = decode_events(encode_events(list(state.recorder.buf)))
    assert c_shipped == py_shipped                  # what reaches the spill: the same array, in order
    assert api.span is not api.py_span          # two implementations compared, not one twice
    assert c_events == py_events and len(c_events) == 10
    assert c_raised == py_raised and len(c_raised) == 8
    assert ("X", "user", "failing", T, 0, "actor", 1, 7, "update_actor", None, {"k": 1, "error": "KeyError"}) in c_events


def test_a_full_buffer_counts_drops_in_c_as_in_python(state):
    state.recorder = Recorder(capacity=2)
    with api.span("a"):
        api.instant("b")
        api.counter("c", v=1)
    rldbg.instant("d")
    assert [e[2] for e in _held(state.recorder)] == ["b", "c"] and state.recorder.dropped == 2


def test_off_spans_are_shared_and_the_first_call_looks_for_the_collector(state):
    state.on, state.recorder = False, None
    assert api.span("shared") is api.span("shared")
    assert api.instant("x") is None and api.counter("x", v=1) is None
    state.looked_up, state.last_lookup = False, 0.0
    api.instant("first")                  # C hands the first look to Python: no Ray here, none found
    assert state.looked_up and not state.on


def test_events_nothing_can_cycle_through_are_kept_out_of_the_gc(state):
    api.instant("atomic", v=1, s="x")
    api.counter("c", v=2.0)
    with api.span("s"):
        pass
    api.instant("holds a list", tags=["a"])
    api.instant("holds an object", obj=state)
    tracked = {decode(e).name: gc.is_tracked(e) for e in state.recorder.buf}
    assert tracked == {"atomic": False, "c": False, "s": False, "holds a list": True, "holds an object": True}


def test_c_holds_events_packed_unless_msgpack_would_need_python(state):
    ints = {"i0": -5, "i1": -100, "i2": -200, "i3": -40000, "i4": -2**40, "i5": 200, "i6": 40000, "i7": 2**31}
    api.instant("atomic", f=-1.5, big=2**63 - 1, neg=-2**63, t=True, n=None, s="é" * 40, **ints)
    api.counter("counter", v=3)
    with api.span("span"):
        pass
    api.instant("list", tags=["a"])
    api.instant("beyond 64 bits", v=2**64)
    api.instant("surrogate", s="\udc80")
    api.instant("many args", **{f"k{i}": i for i in range(16)})
    api.instant("x" * 600)
    held = {decode(e).name: type(e) for e in state.recorder.buf}
    assert held == {"atomic": bytes, "counter": bytes, "span": bytes, "list": tuple, "beyond 64 bits": tuple,
                    "surrogate": tuple, "many args": tuple, "x" * 600: tuple}
    packed = decode(state.recorder.buf[0])
    assert packed.args == {"f": -1.5, "big": 2**63 - 1, "neg": -2**63, "t": True, "n": None, "s": "é" * 40, **ints}
    assert type(packed.args["t"]) is bool and packed.ts_ns == T
    mixed = [e for e in state.recorder.buf if decode(e).name != "surrogate"]   # (the spill reader's own matter)
    shipped = decode_events(encode_events(mixed))                        # bytes and tuples, in order
    assert [e[2] for e in shipped] == [n for n in held if n != "surrogate"] and shipped[4][10] == {"v": str(2**64)}


def _implementation(**env) -> str:
    out = subprocess.run([sys.executable, "-c", "import rldbg.api as a; print(a.IMPLEMENTATION, rldbg_span_type())"
                          .replace("rldbg_span_type()", "type(a.span).__name__")],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_c_paths_are_built_here_and_the_switch_turns_them_off():
    # pip install -e . builds rldbg/_api_c.c; optional=True lets an install without a compiler go
    # on in Python, so this is what tells a silently missing build apart from a working one.
    assert _implementation(RLDBG_PURE_PYTHON="") == "c builtin_function_or_method"
    assert _implementation(RLDBG_PURE_PYTHON="1") == "python function"


def _calls(worker_call, state, seen):
    """Worker calls through either implementation: the context seen inside and after each, the
    scope's fields, and what was recorded (memory samples reduced to their names)."""
    from rldbg import instrument as ri
    ctx, out = current(), []
    ctx.role, ctx.rank, ctx.method, ctx.step, ctx.flow_id = "driver", 0, None, None, None

    def where():
        return (ctx.role, ctx.rank, ctx.method, ctx.step, ctx.flow_id)
    state.on, state.recorder = False, None
    with worker_call("actor", 1, "generate", None) as scope:           # off, untagged
        out.append((where(), scope.role, scope.rank, scope.method, scope.step, scope.t0))
    out.append(where())
    tag = ri.CallTag(flow_id=11, group="actor", method="update", step=4)
    with worker_call("actor", 1, "update", tag) as scope:               # off, tagged
        out.append((where(), scope.step, scope.prev))
    out.append(where())
    live = ri.CallTag(flow_id=12, group="actor", method="update", step=5, specs=(seen + 1, ()))
    with worker_call("actor", 1, "update", live):                        # live breakpoint specs: applied once
        out.append(ri._specs_seen[0])
    state.on, state.recorder = True, Recorder(1000)
    try:
        with worker_call(role="critic", rank=0, method="values", tag=tag):   # on, by keyword, failing
            rldbg.instant("inside")
            raise ValueError("bad")
    except ValueError:
        out.append(where())
    for e in _held(state.recorder):
        args = e[10]
        if e[1] == "memory":
            args = sorted(args)
        elif e[1] == "call":
            args = {k: v for k, v in args.items() if not k.startswith("mem_")}
        out.append(e[:10] + (args,))
    return out


def test_worker_call_in_c_labels_restores_and_records_what_python_does(state):
    from rldbg import instrument as ri
    seen = ri._specs_seen[0]
    try:
        c = _calls(ri.worker_call, state, seen)
        ri._specs_seen[0] = seen
        py = _calls(ri.py_worker_call, state, seen)
    finally:
        ri._specs_seen[0] = seen
    assert ri.worker_call.__mro__[-2].__name__ == "WorkerCall"   # the C one was measured, not Python twice
    assert c == py
    assert c[0] == (("actor", 1, "generate", None, None), "actor", 1, "generate", None, 0)
    assert c[2] == (("actor", 1, "update", 4, 11), 4, ("driver", 0, None, None, None))
    assert c[4] == seen + 1
    names = [(e[0], e[1], e[2]) for e in c[6:]]
    assert names == [("C", "memory", "memory"), ("i", "user", "inside"), ("X", "call", "values"),
                     ("C", "memory", "memory")]
    assert c[8][10]["status"] == "error: ValueError" and c[8][9] == 11


@pytest.mark.parametrize("impl", ["c", "python"])
def test_an_untagged_worker_call_looks_for_the_collector_again_only_after_recheck_s(state, impl):
    from rldbg import instrument as ri
    worker_call = ri.worker_call if impl == "c" else ri.py_worker_call
    state.on, state.recorder = False, None
    state.last_lookup = recent = time.monotonic() - runtime.RECHECK_S / 2
    with worker_call("actor", 0, "m", None):
        pass
    assert state.last_lookup == recent                 # looked recently: no look
    state.last_lookup = time.monotonic() - runtime.RECHECK_S - 1
    with worker_call("actor", 0, "m", None):
        pass
    assert state.last_lookup > recent                  # a slow re-check looked again (nothing found)
