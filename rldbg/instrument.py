"""The seam: hooks a dispatch layer calls. rldbg never imports the trainer; a trainer
(ours, or VeRL-style @register worker groups) calls these (the README's "the contract" section).

Driver side, around every worker-group call:
    call = call_begin(group, method, mode, world, step)   # opens the call
    call_ready(call, shards)                               # step gate: may pause before anything is sent
    call_dispatched(call, shards)                          # per-rank shard summaries; opens the wait span
    call_waiting(call, ranks, s)                           # slow call: report ranks paused at breakpoints
    call_collected(call, result) / call_failed(call, exc)  # closes the call; the gate may pause
    call.tag                                               # small picklable tag sent with the call to ranks
    with step(n): ...                                      # a training step

Worker side:
    set_worker_identity(role, rank, world, roles=...)      # once, at actor start
    with worker_call(role, rank, method, tag): ...         # one span per rank per registered call
    with transition("optimizer_to_host", frees=("optimizer",)): ...  # mode switches, memory at both edges
    ledger(category, nbytes)                               # bytes held by category (params, optimizer, ...)

Off, a hook costs a flag check (rldbg.trace.runtime.STATE.on; a worker call also sets its context
and reads 3 switches, a transition 1); on, it never blocks: events go to a bounded buffer a thread ships.
A driver call is recorded as ONE event when it ends; the exporter expands it into
call > dispatch > send→rank i, and call > wait > recv←rank i slices joined by flows.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import operator
import os
import time
from dataclasses import dataclass, field

from rldbg import switches
from rldbg.context import WorkerIdentity, current, enter_call as _enter_call, leave_call as _leave_call, set_worker
from rldbg.context import set_step as _set_step
from rldbg.control import controller as _controller, gate as _gate
from rldbg.memory.probes import opening as _mem_opening, sample as _mem_sample, sample_full as _mem_sample_full
from rldbg.profilers.cuda_mem import snapshot_transition as _cuda_snapshot
from rldbg.profilers.torch_prof import profile_call as _profile_call
from rldbg.sentinel import CallChecks as _CallChecks
from rldbg.trace import runtime as _rt
from rldbg.trace.events import (FREES, LOADS, driver_call_event, instant_event, ledger_event, memory_event,
                                slice_event, transition_event)

__all__ = ["Call", "CallTag", "call_begin", "call_ready", "call_dispatched", "call_waiting", "call_collected",
           "call_failed", "step", "set_worker_identity", "worker_call", "method_entry", "post_mortem_guard",
           "transition", "ledger", "enabled", "summarize"]

_flow_ids = itertools.count(1)
# A call hangs when it has run HANG_FACTOR times its method's median (over its last 50 calls) and
# at least the session's hang_s; each hung call dumps once (the flight recorder, call_waiting).
HANG_FACTOR = 10.0
_durations: dict = collections.defaultdict(lambda: collections.deque(maxlen=50))
_dumped: set = set()
_specs_seen = [0]   # the version of the live breakpoint specs this process applied last
_now = time.time_ns
_monotonic = time.monotonic
_STATE = _rt.STATE
_getenv = os.environ.get


@dataclass(frozen=True)
class CallTag:
    """What a rank needs to know about the driver call it serves."""

    flow_id: int
    group: str
    method: str
    step: int | None
    # The driver's trace session (its origin_ns), 0 when it is not tracing. A worker that has not
    # found the collector looks at once the first time it sees a session, whenever it last looked.
    traced: int = 0
    specs: tuple | None = None   # (version, spec texts) of breakpoints set live through the hub


@dataclass
class Call:
    """One driver call in flight (call_begin's result); pass it to the other call_* hooks."""

    tag: CallTag
    mode: str
    world: int
    t_begin: int = 0
    t_dispatched: int = 0
    shards: list | None = field(default=None, repr=False)


def enabled() -> bool:
    """True when this process records events."""
    return _rt.STATE.on


def summarize(obj) -> dict | None:
    """A small JSON-able description of a shard or result: rows, keys with shape/dtype/nbytes."""
    if obj is None:
        return None
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        nbytes = getattr(obj, "nbytes", None)
        if nbytes is None and hasattr(obj, "element_size"):
            nbytes = obj.numel() * obj.element_size()
        return {"rows": int(obj.shape[0]) if len(obj.shape) else 1,
                "keys": [{"key": "", "shape": list(obj.shape), "dtype": str(obj.dtype), "nbytes": int(nbytes or 0)}]}
    if isinstance(obj, dict):
        keys, rows = [], None
        for k, v in obj.items():
            s = summarize(v) if hasattr(v, "shape") else None
            if s:
                keys.append(dict(s["keys"][0], key=str(k)))
                rows = s["rows"] if rows is None else rows
        return {"rows": rows or 0, "keys": keys}
    if isinstance(obj, (list, tuple)):
        return {"rows": len(obj), "keys": []}
    return {"type": type(obj).__name__}


def _shard_brief(s) -> dict | None:
    if not isinstance(s, dict):
        return None
    keys = s.get("keys") or []
    return {"rows": s.get("rows"), "nbytes": sum(int(k.get("nbytes") or 0) for k in keys),
            "keys": [k.get("key") for k in keys][:16]}


def _mem_value(m: dict) -> int:
    """The one figure a slice's mem_before/mem_after carry: the device's used bytes where the sample
    has them (a transition's edges), else what the allocator reserved (a GPU call's edges, which
    take no driver call), else RSS."""
    return m["device_used"] if m.get("device_used") is not None else m.get("cuda_reserved", m["rss"])


# ---- driver -------------------------------------------------------------------------------

def call_begin(group: str, method: str, mode: str, world: int, step: int | None = None) -> Call:
    """Open a driver call of `group.method` on `world` ranks (`mode`: the dispatch mode, free text).
    Send `call.tag` with the call to every rank (for worker_call / method_entry)."""
    global _flow_ids
    if _gate._gate is None and _controller.due():
        # A controller in a Ray actor (VeRL's TaskRunner) joins the job's hub and numbers its calls
        # apart from every other controller's.
        _flow_ids = _controller.join() or _flow_ids
    on = _rt.STATE.on
    version, texts = _gate.current_specs()
    specs = (version, tuple(texts)) if version else None
    session = int(_rt.STATE.config.get("origin_ns") or 1) if on else 0
    return Call(CallTag(next(_flow_ids), group, method, step, session, specs), mode, world,
                time.time_ns() if on else 0)


def call_ready(call: Call, shards: list | None = None) -> None:
    """The batch is split and nothing is sent yet: the step gate's before-dispatch pause point."""
    if _gate.before_dispatch(call, shards) and call.t_begin:
        call.t_begin = time.time_ns()  # a human pause is not dispatch time


def call_dispatched(call: Call, shards: list | None = None) -> None:
    """Everything is sent; `shards` (optional, one summarize()d dict per rank) go in the trace."""
    if _rt.STATE.on:
        call.t_dispatched = time.time_ns()
        if shards is not None:   # summaries (summarize()) or the shards themselves
            call.shards = [_shard_brief(s if isinstance(s, dict) and ("keys" in s or "type" in s) else summarize(s))
                           for s in shards]


def _finish(call: Call, status: str, extra: dict) -> None:
    if not _rt.STATE.on or not call.t_begin:
        return
    t_end = time.time_ns()
    tag = call.tag
    args = {"group": tag.group, "mode": call.mode, "world": call.world, "status": status,
            "t_dispatched": call.t_dispatched or t_end, "shards": call.shards, **extra}
    _rt.emit(driver_call_event(f"{tag.group}.{tag.method}", call.t_begin, t_end - call.t_begin,
                               tag.step, tag.method, tag.flow_id, args))
    if status == "ok":
        _durations[(tag.group, tag.method)].append((t_end - call.t_begin) / 1e9)


def call_collected(call: Call, result=None) -> None:
    """Results are in: closes the call (its trace event is recorded now); the step gate may pause."""
    if _rt.STATE.on:
        _finish(call, "ok", {"result": result if isinstance(result, (dict, type(None))) else summarize(result)})
    _gate.after_collect(call, result)  # after the trace event: a pause here is not part of the call


def call_failed(call: Call, exc: BaseException) -> None:
    """The call raised `exc` (instead of call_collected): recorded with status "error"."""
    if _rt.STATE.on:
        _finish(call, "error", {"error": f"{type(exc).__name__}: {exc}"[:500]})


@contextlib.contextmanager
def step(n: int):
    """Marks a training step on the driver (the process's step: rldbg.context); calls made inside
    carry it, calls after it do not."""
    prev = _set_step(n)
    _gate.set_step(n)
    t0 = time.time_ns() if _rt.STATE.on else 0
    if t0:
        _rt.emit(instant_event("step", "step start", t0, "driver", 0, n, None, {"step": n}))
    try:
        yield
    finally:
        _set_step(prev)
        if t0 and _rt.STATE.on:
            _rt.emit(slice_event("step", f"step {n}", t0, time.time_ns() - t0, "driver", 0, n, None, None,
                                 {"step": n}))


# ---- worker -------------------------------------------------------------------------------

def set_worker_identity(role: str, rank: int, world: int, *, roles=None, node_id: str | None = None,
                        node_ip: str | None = None) -> WorkerIdentity:
    """Call once at worker (actor) start: this process serves `role` (or, colocated, all of
    `roles`) as `rank` of `world`. rldbg labels the process's events with it, finds the trace
    collector, and publishes it in the cluster's registry, so `rldbg breakpoints / stack / top /
    attach` name any trainer's actors by role and rank. node_id/node_ip default to Ray's. Returns
    the identity; its .label ("actor+reward[rank 1/2]") may be the actor's __repr__."""
    from rldbg.context import _roles

    names = _roles(roles if roles else role)
    integers = all(hasattr(type(v), "__index__") and not isinstance(v, bool) for v in (rank, world))   # numpy's too
    if not integers or not 0 <= operator.index(rank) < operator.index(world):
        raise ValueError(f"set_worker_identity: bad rank {rank!r} of world {world!r}: expected integers, "
                         "0 <= rank < world")
    if role not in names and "+".join(names) != role:
        names = (role, *[r for r in names if r != role])
    if node_id is None or node_ip is None:
        found_id, found_ip = _rt.ray_node()
        node_id, node_ip = node_id or found_id, node_ip or found_ip
    ident = WorkerIdentity(names, int(rank), int(world), node_id or "", node_ip or "")
    set_worker(ident)
    _rt.lookup(force=True)
    from rldbg.debug.registry import publish_identity

    publish_identity(ident)
    from rldbg.debug.listen import maybe_listen

    maybe_listen(ident.role, ident.rank, ident.world)  # debug mode (RLDBG_LISTEN_ROLES): one env lookup when off
    return ident


class worker_call(_CallChecks):  # noqa: N801 - used as a function: `with worker_call(...)`
    """`with worker_call(role, rank, method, tag) as scope:` this rank serves `method` for the driver
    call `tag` (None: untagged): one span joined to the driver's send/recv, memory before and after;
    code inside runs in a context of the call's own (rldbg.context). `scope` carries rldbg.sentinel's
    checks: pass it the call's result (.returned) or error (.raised). A class, not a generator:
    every registered call passes through it, and off it costs a few attribute stores and flag checks."""

    __slots__ = ("role", "rank", "method", "step", "tag", "token", "t0", "m0", "prof")

    def __init__(self, role: str, rank: int, method: str, tag: CallTag | None):
        self.role, self.rank, self.method, self.tag = role, rank, method, tag

    def __enter__(self):
        tag, st = self.tag, _STATE
        on = st.on
        if tag is not None:
            step, flow = tag.step, tag.flow_id
            if tag.specs and tag.specs[0] != _specs_seen[0]:   # breakpoints set live through the hub
                from rldbg.debug.breakpoints import set_active_specs
                set_active_specs(list(tag.specs[1]))
                _specs_seen[0] = tag.specs[0]
            if not on and tag.traced:
                on = _rt.lookup(session=tag.traced)   # tracing started after this actor did
        else:
            outer = current()                         # untagged: the step and flow it runs in
            step, flow = outer.step, outer.flow_id
            if not on and _monotonic() - st.last_lookup >= _rt.RECHECK_S:
                on = _rt.lookup()                     # a slow re-check
        self.step = step
        self.token = _enter_call(self.role, self.rank, self.method, step, flow)
        self.t0, self.prof = 0, None
        profile = _getenv(switches.PROFILE)
        if profile is not None:                       # torch.profiler, when RLDBG_PROFILE selects this call
            self.prof = _profile_call(self.role, self.rank, self.method, step)
            self.prof.__enter__()                     # operator slices nest in this call's span
        if on:
            self.m0 = _mem_sample()
            self.t0 = _now()
            _rt.emit(memory_event(self.t0, self.role, self.rank, step, self.method, self.m0))
        return self

    def __exit__(self, et, ev, tb):
        if self.t0 or self.prof is not None:
            self._end(et, ev, tb)
        else:
            _leave_call(self.token)
        return False

    def _end(self, et, ev, tb) -> None:
        try:
            if self.prof is not None:
                self.prof.__exit__(et, ev, tb)
            if self.t0 and _STATE.on:
                t1 = _now()
                m1 = _mem_sample()
                tag = self.tag
                flow = tag.flow_id if tag is not None else None
                args = {"role": self.role, "rank": self.rank, "step": self.step, "method": self.method,
                        "flow": flow, "group": tag.group if tag is not None else None,
                        "mem_before": _mem_value(self.m0), "mem_after": _mem_value(m1)}
                if et is not None:
                    args["status"] = f"error: {et.__name__}"
                _rt.emit(slice_event("call", self.method, self.t0, t1 - self.t0, self.role, self.rank, self.step,
                                     self.method, flow, args))
                _rt.emit(memory_event(t1, self.role, self.rank, self.step, self.method, m1))
        finally:
            _leave_call(self.token)


def _categories(what, kw: str) -> tuple:
    out = () if not what else (what,) if isinstance(what, str) else tuple(what)
    if not all(isinstance(c, str) and c for c in out):
        raise ValueError(f"transition {kw}= takes ledger category names (strings), got {what!r}")
    return out


class transition:  # noqa: N801 - used as a function: `with transition(...)`
    """`with transition(name, frees=..., loads=...):` a hybrid-engine transition: its own span with memory
    before and after (and, with RLDBG_CUDA_MEMORY_SNAPSHOT on a GPU, a CUDA memory snapshot around it).
    `frees` / `loads` declare what it moves in ledger categories, e.g. frees=("optimizer",): leak detection
    and `rldbg top` read the declaration, never the name. Report the moved categories' new sizes with
    ledger() inside the block. Other keyword arguments are recorded with the span. A class, as
    worker_call: two nested generator context managers added half again to the span's own cost."""

    __slots__ = ("name", "args", "snap", "t0", "m0", "who")

    def __init__(self, name: str, frees=(), loads=(), **args):
        args.update((k, c) for k, c in ((FREES, _categories(frees, "frees")), (LOADS, _categories(loads, "loads"))) if c)
        self.name, self.args, self.t0 = name, args, 0

    def __enter__(self):
        self.snap = _cuda_snapshot(self.name)
        self.snap.__enter__()
        if _STATE.on:
            ctx = current()
            self.who = role, rank, stp, method = ctx.role, ctx.rank, ctx.step, ctx.method
            # The device's view at both edges (not only the sampler's 10 Hz): what a transition
            # returned to the GPU is read off these two samples (rldbg.analysis.transitions).
            self.m0, new = _mem_opening()   # new: else the series has this sample's point already
            self.t0 = _now()
            if new:
                _rt.emit(memory_event(self.t0, role, rank, stp, method, self.m0))
        return self

    def __exit__(self, et, ev, tb):
        try:
            if self.t0:
                t1 = _now()
                m1 = _mem_sample_full()
                role, rank, stp, method = self.who
                a = {"role": role, "rank": rank, "step": stp, "method": method, **self.args}
                if et is not None:
                    a["status"] = f"error: {et.__name__}"
                a["mem_before"], a["mem_after"] = _mem_value(self.m0), _mem_value(m1)
                _rt.emit(transition_event(self.name, self.t0, t1 - self.t0, role, rank, stp, method, a))
                _rt.emit(memory_event(t1, role, rank, stp, method, m1))
        finally:
            self.snap.__exit__(et, ev, tb)


def ledger(category: str, nbytes: int) -> None:
    """This rank now holds `nbytes` in `category` (params, optimizer, kv_cache, ...: any name; the
    names transitions declare in frees=/loads=). Report when it changes."""
    rec = _rt.STATE.recorder
    if rec is not None:
        ctx = current()
        rec.emit(ledger_event(time.time_ns(), ctx.role, ctx.rank, ctx.step, ctx.method, str(category), int(nbytes)))


# ---- debugging hooks (rldbg.debug is imported only when a switch is on) ----------------
def method_entry(role: str, rank: int, method: str, tag: CallTag | None) -> None:
    """Call as a registered method starts: pauses here when a breakpoint spec matches
    (RLDBG_BREAKPOINTS or specs pushed live), showing the frame about to call the method."""
    if not _debug_switches():
        return
    from rldbg.debug.breakpoints import check_method_entry

    check_method_entry(role, rank, method, tag.step if tag is not None else None)


def post_mortem_guard():
    """`with post_mortem_guard(): method(...)`: with RLDBG_POST_MORTEM=1 an escaping
    exception pauses the worker at the raising frame for a debugger, then propagates."""
    if _getenv(switches.POST_MORTEM) != "1":
        return contextlib.nullcontext()
    from rldbg.debug.breakpoints import post_mortem_guard as guard

    return guard()


def _debug_switches() -> bool:
    if _specs_seen[0] or _getenv(switches.BREAKPOINTS):
        return True
    import sys

    mod = sys.modules.get("rldbg.debug.breakpoints")  # specs pushed live were set through it
    return mod is not None and bool(mod.active_specs().list())


def call_waiting(call: Call, pending_ranks: list[int], waited_s: float) -> None:
    """The driver has waited `waited_s` on `pending_ranks`: report ranks paused at a breakpoint;
    with the flight recorder, a call that looks hung dumps every process's window and stacks."""
    from rldbg.debug.wait_report import report

    report(call.tag.group, call.tag.method, call.tag.flow_id, waited_s)
    config = _rt.STATE.config
    if not (_rt.STATE.on and config.get("window")):
        return
    import statistics

    tag, ranks = call.tag, pending_ranks
    past = _durations.get((tag.group, tag.method))
    limit = max(float(config.get("hang_s", 60.0)), HANG_FACTOR * statistics.median(past) if past else 0.0)
    if waited_s < limit or tag.flow_id in _dumped:
        return
    _dumped.add(tag.flow_id)
    from rldbg.trace import session

    with contextlib.suppress(Exception):   # never disturb the run
        # On the rank's track when one rank is late; on the driver's when several are (which
        # one holds the others up is for the stacks to show).
        who = {"role": tag.group, "rank": int(ranks[0])} if len(ranks) == 1 else {"group": tag.group}
        session.dump("hang", **who, method=tag.method, step=tag.step, waiting_on=[int(r) for r in ranks],
                     waited_s=round(waited_s, 1), limit_s=round(limit, 1))
