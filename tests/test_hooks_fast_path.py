"""The hot-path hooks (rldbg.span/instant/counter, instrument.worker_call) keep their meaning after
being made cheap: off-spans are shared per name but still propagate errors and still decorate;
worker_call labels the code inside and restores the context after, on and off, also on error."""
from __future__ import annotations

import time

import pytest

import rldbg
from rldbg import instrument as ri
from rldbg.context import current
from rldbg.memory import probes
from rldbg.trace import runtime
from rldbg.trace.events import decode
from rldbg.trace.recorder import Recorder
from rldbg.trace.spill import decode_events, join_packed


def _held(rec) -> list:
    """The events the recorder holds (packed: rldbg.trace.spill.pack_event), decoded."""
    return [decode(e) for e in decode_events(join_packed(list(rec.buf)))]


@pytest.fixture
def tracing_state():
    """Tracing off, as in a process that looked for a collector and found none; yields a function
    that turns recording on into a real in-process Recorder (nothing shipped)."""
    st = runtime.STATE
    saved = (st.on, st.looked_up, st.recorder, st.last_lookup)
    probes._own["last"] = (0, None)   # no sample of an earlier test for a span's opening to take
    st.on, st.looked_up, st.recorder, st.last_lookup = False, True, None, time.monotonic()

    def turn_on() -> Recorder:
        st.recorder, st.on = Recorder(capacity=1000), True
        return st.recorder

    yield turn_on
    st.on, st.looked_up, st.recorder, st.last_lookup = saved


def test_off_spans_propagate_errors_and_reject_bad_names(tracing_state):
    with pytest.raises(KeyError):
        with rldbg.span("x"):
            raise KeyError("boom")
    assert rldbg.span("x") is rldbg.span("x")          # shared while off: nothing allocated
    assert rldbg.span("x", n=1) is not rldbg.span("x", n=1)
    for bad in ("", None, ["x"], 3):
        with pytest.raises(ValueError, match="span name must be a non-empty string"):
            rldbg.span(bad)
    with pytest.raises(ValueError, match="counter 'c': values must be numbers"):
        tracing_state()
        rldbg.counter("c", v="high")


def test_a_function_decorated_while_off_is_traced_once_tracing_is_on(tracing_state):
    @rldbg.span("decorated", kind="fn")
    def work(x):
        return x * 2

    assert work(2) == 4                                  # off: runs, records nothing
    rec = tracing_state()
    assert work(3) == 6
    with rldbg.span("block"):
        rldbg.instant("mark", i=1)
    evs = _held(rec)
    assert [e.name for e in evs] == ["decorated", "mark", "block"]
    assert evs[0].args == {"kind": "fn"} and evs[2].args is None


def _where():
    ctx = current()
    return (ctx.role, ctx.rank, ctx.method, ctx.step, ctx.flow_id)


def test_worker_call_labels_and_restores_the_context_off_and_on(tracing_state):
    before = _where()
    tag = ri.CallTag(flow_id=7, group="actor", method="update", step=3)
    with ri.worker_call("actor", 1, "update", tag) as scope:
        assert _where() == ("actor", 1, "update", 3, 7)
        assert (scope.role, scope.rank, scope.method, scope.step) == ("actor", 1, "update", 3)
    assert _where() == before

    rec = tracing_state()
    with pytest.raises(RuntimeError):
        with ri.worker_call("actor", 1, "update", tag):
            rldbg.instant("inside")
            raise RuntimeError("bad batch")
    assert _where() == before
    evs = _held(rec)
    call = [e for e in evs if e.cat == "call"]
    assert len(call) == 1 and call[0].flow == 7 and call[0].args["status"] == "error: RuntimeError"
    inside = [e for e in evs if e.name == "inside"][0]
    assert (inside.role, inside.rank, inside.step, inside.method) == ("actor", 1, 3, "update")
    assert [e.name for e in evs if e.cat == "memory"] == ["memory", "memory"]   # before and after


def test_what_a_caller_hands_a_hook_is_recorded_as_it_was_when_the_hook_ran(tracing_state):
    """Events are packed as they are recorded, so what a driver call's result and shards or a
    transition's own keyword values were then is what the trace says, whatever the caller does
    with those objects afterwards (and buffered events are bytes, never tuples and dicts that
    would reach the garbage collector's old generation: bench_hooks.py's rows)."""
    rec = tracing_state()
    result, shards, phases = {"loss": 1.0}, [{"rows": 4, "keys": []}], ["offload"]
    call = ri.call_begin("actor", "update", "DP_COMPUTE_PROTO", 1, step=2)
    ri.call_dispatched(call, shards)
    ri.call_collected(call, result)
    with ri.transition("optimizer_to_host", frees=("optimizer",), phases=phases):
        phases.append("in place")
    result["loss"], shards[0]["rows"] = float("nan"), 0
    phases.append("after")
    assert all(type(e) is bytes for e in rec.buf)
    evs = _held(rec)
    driver = next(e for e in evs if e.cat == "call")
    assert driver.args["result"] == {"loss": 1.0} and driver.args["shards"][0]["rows"] == 4
    span = next(e for e in evs if e.cat == "transition")
    assert span.args["phases"] == ["offload", "in place"] and span.args["frees"] == ["optimizer"]


def test_a_driver_call_takes_its_shards_as_summaries_or_as_the_shards_themselves(tracing_state):
    """The README's `ri.call_dispatched(call, shards)`: the shards as sent (a tensor, a dict of
    tensors, a list) are summarised as ri.summarize() would; a summary is taken as it is."""
    import torch

    rec = tracing_state()
    call = ri.call_begin("rollout", "generate", "all", 4, step=0)
    ri.call_dispatched(call, [torch.zeros(4, 2), {"ids": torch.zeros(3, 5, dtype=torch.int64)}, [1, 2],
                              ri.summarize(torch.zeros(6))])
    ri.call_collected(call)
    shards = next(e for e in _held(rec) if e.cat == "call").args["shards"]
    assert shards == [{"rows": 4, "nbytes": 32, "keys": [""]}, {"rows": 3, "nbytes": 120, "keys": ["ids"]},
                      {"rows": 2, "nbytes": 0, "keys": []}, {"rows": 6, "nbytes": 24, "keys": [""]}]


@pytest.mark.parametrize("reuse_ns", [0, 10**10])
def test_an_opening_takes_the_sample_an_adjacent_edge_just_took_and_an_end_always_reads_anew(tracing_state,
                                                                                           monkeypatch, reuse_ns):
    """Where a sample is RSS alone, a transition opening within OPENING_REUSE_NS of the process's last
    sample takes it instead of reading again, and records no point of its own (the series has it);
    a span's end reads anew however soon: what the span freed shows there, in microseconds. A call's
    start always records its point: `rldbg top` tells a running call by it."""
    import mmap

    assert probes._allocator() is None   # CPU-only torch here: a sample is RSS alone
    monkeypatch.setattr(probes, "OPENING_REUSE_NS", reuse_ns)
    rec = tracing_state()
    block = mmap.mmap(-1, 64 << 20)
    for at in range(0, len(block), mmap.PAGESIZE):
        block[at] = 1
    with ri.transition("first"):
        pass
    with ri.transition("free_it", frees=("buffer",)):
        block.close()   # 64 MiB returned well within the reuse window
    with ri.worker_call("actor", 0, "next_call", None):
        pass
    evs = _held(rec)
    first, free_it = (next(e for e in evs if e.cat == "transition" and e.name == n) for n in ("first", "free_it"))
    call = next(e for e in evs if e.cat == "call")
    assert free_it.args["mem_before"] - free_it.args["mem_after"] > 60 << 20
    points = [e.ts_ns for e in evs if e.cat == "memory"]
    calls = [call.ts_ns, call.ts_ns + call.dur_ns]
    if reuse_ns:
        assert free_it.args["mem_before"] == first.args["mem_after"]
        assert points == [first.ts_ns, first.ts_ns + first.dur_ns, free_it.ts_ns + free_it.dur_ns, *calls]
    else:
        assert points == [first.ts_ns, first.ts_ns + first.dur_ns, free_it.ts_ns, free_it.ts_ns + free_it.dur_ns,
                          *calls]
