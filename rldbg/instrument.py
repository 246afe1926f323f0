"""The seam: hooks a dispatch layer calls. rldbg never imports the trainer; a trainer
(ours, or VeRL-style @register worker groups) calls these.

Driver side, around every worker-group call:
    call = call_begin(group, method, mode, world, step)   # opens the dispatch span, may pause (step gate)
    ... split the batch, submit to ranks ...
    call_dispatched(call, shards)                          # per-rank shard summaries; opens the wait span
    ... ray.get ...
    call_collected(call, result)                           # closes wait, records collect
    call_failed(call, exc)                                 # instead of call_collected on error
    call.tag                                               # small picklable tag sent with the call to ranks

Worker side:
    set_worker_identity(role, rank, world)                 # once, at actor start
    with worker_call(role, rank, method, tag): ...         # one span per rank per registered call
    with transition("offload_optimizer", **args): ...      # hybrid-engine mode switches; memory before/after
    ledger(category, nbytes)                               # bytes held by category (params, optimizer, kv_cache, ...)

Driver step markers:
    with step(n): ...

Every hook must cost next to nothing when tracing is off and never block training.
"""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass

from rldbg.context import current, set_identity

_flow_ids = itertools.count(1)


@dataclass(frozen=True)
class CallTag:
    """What a rank needs to know about the driver call it serves."""

    flow_id: int
    group: str
    method: str
    step: int | None


@dataclass
class Call:
    tag: CallTag
    mode: str
    world: int
    t_begin: int = 0
    t_dispatched: int = 0


def call_begin(group: str, method: str, mode: str, world: int, step: int | None = None) -> Call:
    return Call(CallTag(next(_flow_ids), group, method, step), mode, world)


def call_dispatched(call: Call, shards: list | None = None) -> None:
    return None


def call_collected(call: Call, result=None) -> None:
    return None


def call_failed(call: Call, exc: BaseException) -> None:
    return None


def set_worker_identity(role: str, rank: int, world: int) -> None:
    set_identity(role, rank, world)


@contextlib.contextmanager
def worker_call(role: str, rank: int, method: str, tag: CallTag | None):
    ctx = current()
    prev = (ctx.role, ctx.method, ctx.step, ctx.flow_id)
    ctx.role, ctx.method = role, method
    if tag is not None:
        ctx.step, ctx.flow_id = tag.step, tag.flow_id
    try:
        yield
    finally:
        ctx.role, ctx.method, ctx.step, ctx.flow_id = prev


@contextlib.contextmanager
def transition(name: str, **args):
    yield


@contextlib.contextmanager
def step(n: int):
    current().step = n
    yield


def ledger(category: str, nbytes: int) -> None:
    return None
