"""What rldbg.span/instant/counter and instrument.worker_call record, exactly: every event field
from the context the code runs in, args as given (an error's type added to a failing span's),
the errors a bad call raises, drops counted when the buffer is full, and what the shipper packs."""
from __future__ import annotations

import time

import pytest

import rldbg
from rldbg import api, context
from rldbg import instrument as ri
from rldbg.context import current
from rldbg.trace import runtime
from rldbg.trace.events import decode
from rldbg.trace.recorder import Recorder
from rldbg.trace.spill import decode_events, encode_events, join_packed

T = 1_700_000_000_000_000_000


@pytest.fixture
def state(monkeypatch):
    """Tracing on into an in-process Recorder, on a clock that always reads T (dur 0), so that
    events compare exactly."""
    st = runtime.STATE
    saved = (st.on, st.looked_up, st.recorder, st.last_lookup)
    st.on, st.looked_up, st.recorder, st.last_lookup = True, True, Recorder(1000), time.monotonic()
    monkeypatch.setattr(api, "_now", lambda: T)  # user events' timestamps
    monkeypatch.setattr(ri, "_now", lambda: T)   # worker calls' own timestamps
    yield st
    st.on, st.looked_up, st.recorder, st.last_lookup = saved


def _script():
    """Every form of the API once, in a call's context and out of it; returns what each call raised."""
    raised = []
    token = context.enter_call("actor", 1, "update_actor", 7, None)
    try:
        with rldbg.span("outer"):
            with rldbg.span("inner", n=3, name="kw named name"):
                rldbg.instant("mark")
                rldbg.instant("mark", acc=0.5, tags=["a"])
            rldbg.counter("tokens", per_s=12.5, n=3, ok=True)
            rldbg.counter("empty")
        try:
            with rldbg.span("failing", k=1):
                raise KeyError("boom")
        except KeyError:
            raised.append("KeyError")

        @rldbg.span("decorated", kind="fn")
        def work(x):
            return x * 2
        assert work(4) == 8
    finally:
        context.leave_call(token)
    token = context.enter_call("critic", 0, None, None, None)
    try:
        with rldbg.span("plain"):
            pass
        for call in (lambda: rldbg.span(""), lambda: rldbg.span(3), lambda: rldbg.span(),
                     lambda: rldbg.counter("c", v="high"), lambda: rldbg.counter("c", 1), lambda: rldbg.instant(),
                     lambda: rldbg.instant("x", name="y")):
            try:
                call()
            except (TypeError, ValueError) as e:
                raised.append(type(e).__name__)
        rldbg.instant(name="by keyword", v=1)
    finally:
        context.leave_call(token)
    return raised


def _held(rec) -> list:
    """The events the recorder holds (packed: rldbg.trace.spill.pack_event), as the spill gives them back."""
    return [tuple(decode(e)) for e in decode_events(join_packed(list(rec.buf)))]


def test_each_call_records_its_event_with_the_context_it_runs_in_and_bad_calls_raise(state):
    raised = _script()
    who = ("actor", 1, 7, "update_actor")
    assert _held(state.recorder) == [
        ("i", "user", "mark", T, 0, *who, None, None),
        ("i", "user", "mark", T, 0, *who, None, {"acc": 0.5, "tags": ["a"]}),
        ("X", "user", "inner", T, 0, *who, None, {"n": 3, "name": "kw named name"}),
        ("C", "user", "tokens", T, 0, *who, None, {"per_s": 12.5, "n": 3, "ok": True}),
        ("C", "user", "empty", T, 0, *who, None, {}),
        ("X", "user", "outer", T, 0, *who, None, None),          # no args: None, nothing to pack
        ("X", "user", "failing", T, 0, *who, None, {"k": 1, "error": "KeyError"}),
        ("X", "user", "decorated", T, 0, *who, None, {"kind": "fn"}),
        ("X", "user", "plain", T, 0, "critic", 0, None, None, None, None),
        ("i", "user", "by keyword", T, 0, "critic", 0, None, None, None, {"v": 1}),
    ]
    assert raised == ["KeyError", "ValueError", "ValueError", "TypeError", "ValueError", "TypeError", "TypeError",
                      "TypeError"]
    # what reaches the spill: the events packed one by one make, joined, the bytes of packing them as one batch
    assert join_packed(list(state.recorder.buf)) == encode_events(_held(state.recorder))


def test_what_msgpack_cannot_pack_is_shipped_as_json_would_write_it(state):
    rldbg.instant("beyond 64 bits", v=2**64)
    rldbg.instant("an object", obj=state)
    rldbg.instant("atomic", f=-1.5, big=2**63 - 1, neg=-2**63, t=True, n=None, s="é" * 40)
    shipped = decode_events(join_packed(list(state.recorder.buf)))
    assert [e[2] for e in shipped] == ["beyond 64 bits", "an object", "atomic"]
    assert shipped[0][10] == {"v": str(2**64)} and shipped[1][10] == {"obj": str(state)}
    assert shipped[2][10] == {"f": -1.5, "big": 2**63 - 1, "neg": -2**63, "t": True, "n": None, "s": "é" * 40}
    assert type(shipped[2][10]["t"]) is bool


def test_a_full_buffer_counts_drops(state):
    state.recorder = Recorder(capacity=2)
    with rldbg.span("a"):
        rldbg.instant("b")
        rldbg.counter("c", v=1)
    rldbg.instant("d")
    assert [e[2] for e in _held(state.recorder)] == ["b", "c"] and state.recorder.dropped == 2


def test_off_spans_are_shared_and_the_first_call_looks_for_the_collector(state):
    state.on, state.recorder = False, None
    assert rldbg.span("shared") is rldbg.span("shared")
    assert rldbg.instant("x") is None and rldbg.counter("x", v=1) is None
    state.looked_up, state.last_lookup = False, 0.0
    rldbg.instant("first")                  # no Ray here: looked for, none found
    assert state.looked_up and not state.on


def _where():
    c = current()
    return (c.role, c.rank, c.method, c.step, c.flow_id)


def test_worker_call_labels_the_code_inside_restores_after_and_records_the_call(state):
    seen = ri._specs_seen[0]
    before = _where()
    try:
        state.on, state.recorder = False, None
        with ri.worker_call("actor", 1, "generate", None) as scope:          # off, untagged
            assert _where() == ("actor", 1, "generate", before[3], before[4])   # the step it runs in
            assert (scope.role, scope.rank, scope.method, scope.step, scope.t0) == ("actor", 1, "generate",
                                                                                    before[3], 0)
        assert _where() == before
        tag = ri.CallTag(flow_id=11, group="actor", method="update", step=4)
        with ri.worker_call("actor", 1, "update", tag) as scope:              # off, tagged
            assert _where() == ("actor", 1, "update", 4, 11) and scope.step == 4
        assert _where() == before
        live = ri.CallTag(flow_id=12, group="actor", method="update", step=5, specs=(seen + 1, ()))
        with ri.worker_call("actor", 1, "update", live):                       # live breakpoint specs: applied
            assert ri._specs_seen[0] == seen + 1
        state.on, state.recorder = True, Recorder(1000)
        with pytest.raises(ValueError):
            with ri.worker_call(role="critic", rank=0, method="values", tag=tag):   # on, by keyword, failing
                rldbg.instant("inside")
                raise ValueError("bad")
        assert _where() == before
    finally:
        ri._specs_seen[0] = seen
    evs = _held(state.recorder)
    assert [(e[0], e[1], e[2]) for e in evs] == [("C", "memory", "memory"), ("i", "user", "inside"),
                                                 ("X", "call", "values"), ("C", "memory", "memory")]
    assert all(e[5:9] == ("critic", 0, 4, "values") for e in evs)
    call = evs[2]
    assert call[3:5] == (T, 0) and call[9] == 11
    assert {k: v for k, v in call[10].items() if not k.startswith("mem_")} == {
        "role": "critic", "rank": 0, "step": 4, "method": "values", "flow": 11, "group": "actor",
        "status": "error: ValueError"}
    assert set(evs[0][10]) == set(evs[3][10]) and "rss" in evs[0][10]


def test_an_untagged_worker_call_looks_for_the_collector_again_only_after_recheck_s(state):
    state.on, state.recorder = False, None
    state.last_lookup = recent = time.monotonic() - runtime.RECHECK_S / 2
    with ri.worker_call("actor", 0, "m", None):
        pass
    assert state.last_lookup == recent                 # looked recently: no look
    state.last_lookup = time.monotonic() - runtime.RECHECK_S - 1
    with ri.worker_call("actor", 0, "m", None):
        pass
    assert state.last_lookup > recent                  # a slow re-check looked again (nothing found)
