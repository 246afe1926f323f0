"""The event record: the one schema every rldbg producer writes and every consumer reads.

An event is a plain tuple (cheap to build; packed as recorded, a msgpack array in the spill: rldbg.trace.spill):
    (ph, cat, name, ts_ns, dur_ns, role, rank, step, method, flow, args)
ph:     SLICE "X" (a span), INSTANT "i", COUNTER "C" (args = {series: number}),
        DRIVER_CALL "D" (one driver call, expanded into call/dispatch/send/wait/recv slices at export).
cat:    "call" (a rank serving a driver call), "transition", "user", "step", "memory", "ledger", "rldbg".
ts_ns:  time.time_ns() of the recording process; the exporter shifts it onto the collector's clock.
role, rank, step, method: who recorded it (rldbg.context); flow: the driver call's flow id that
        joins a rank's slice to the driver's send/recv; args: a small JSON-able dict.

Producers build events ONLY with the constructors below (one tuple literal each); consumers read
them through decode() (attribute access) or to_dict() (the hub's JSON form). A transition's args
declare what it moves (FREES, LOADS: ledger categories, "" for untracked memory), never guessed
from its name: leak detection (rldbg.memory.leaks) reads these declarations.
"""
from __future__ import annotations

from collections import namedtuple

PH, CAT, NAME, TS, DUR, ROLE, RANK, STEP, METHOD, FLOW, ARGS = range(11)
FIELDS = ("ph", "cat", "name", "ts_ns", "dur_ns", "role", "rank", "step", "method", "flow", "args")

SLICE, INSTANT, COUNTER, DRIVER_CALL = "X", "i", "C", "D"

# Counter event names; the exporter turns them into per-rank tracks "rank N <name> <series>".
MEMORY, LEDGER = "memory", "ledger"
# The cat of a GPU's own counter ("gpu0 memory": used, total, and "pid N" per process on it).
GPU = "gpu"

# Keys in a transition's args declaring what it moves.
FREES, LOADS = "frees", "loads"
# In a step slice's args: the step was recorded after its calls (a loop learnt from call order is
# known only once it comes round), which carry no step; the report numbers them by the slice.
NUMBERED_AFTER = "numbered_after"
# The instant a flight recorder's dump starts with (rldbg.trace.flight): what triggered it.
TRIGGER = "rldbg flight trigger"
# The instant of a stop at a breakpoint (or post mortem): the call it paused lasts as long as the user looked.
BREAKPOINT = "breakpoint"


Event = namedtuple("Event", FIELDS)


def slice_event(cat: str, name: str, ts_ns: int, dur_ns: int, role: str, rank: int, step, method,
                flow=None, args: dict | None = None) -> tuple:
    """A span [ts_ns, ts_ns + dur_ns) on role/rank's track."""
    return (SLICE, cat, name, ts_ns, dur_ns, role, rank, step, method, flow, args)


def instant_event(cat: str, name: str, ts_ns: int, role: str, rank: int, step, method,
                  args: dict | None = None) -> tuple:
    """A point in time on role/rank's track."""
    return (INSTANT, cat, name, ts_ns, 0, role, rank, step, method, None, args)


def counter_event(cat: str, name: str, ts_ns: int, role: str, rank: int, step, method, values: dict) -> tuple:
    """One sample of the numeric series in `values` ({series: number}) on role/rank's counter track."""
    return (COUNTER, cat, name, ts_ns, 0, role, rank, step, method, None, values)


def memory_event(ts_ns: int, role: str, rank: int, step, method, sample: dict) -> tuple:
    """A memory sample (rldbg.memory.probes.sample(): rss, device_used, ...) of role/rank."""
    return (COUNTER, MEMORY, MEMORY, ts_ns, 0, role, rank, step, method, None, sample)


def ledger_event(ts_ns: int, role: str, rank: int, step, method, category: str, nbytes: int) -> tuple:
    """Bytes role/rank holds in a ledger category (params, optimizer, kv_cache, ...) from now on."""
    return (COUNTER, LEDGER, LEDGER, ts_ns, 0, role, rank, step, method, None, {category: nbytes})


def transition_event(name: str, ts_ns: int, dur_ns: int, role: str, rank: int, step, method, args: dict) -> tuple:
    """A hybrid-engine transition span; args carry FREES/LOADS and mem_before/mem_after."""
    return (SLICE, "transition", name, ts_ns, dur_ns, role, rank, step, method, None, args)


def driver_call_event(name: str, ts_ns: int, dur_ns: int, step, method: str, flow: int, args: dict) -> tuple:
    """One driver→ranks call, recorded when it ends. args: group, mode, world, status, t_dispatched,
    shards, result/error."""
    return (DRIVER_CALL, "call", name, ts_ns, dur_ns, "driver", 0, step, method, flow, args)


decode = Event._make   # any stored form of an event (the tuple recorded, the list a spill holds) -> Event


def to_dict(ev) -> dict:
    """The JSON form the hub serves and `rldbg top` reads: {field: value} with FIELDS as keys."""
    return dict(zip(FIELDS, ev))


def moves(args: dict | None) -> tuple[tuple, tuple]:
    """(frees, loads) a transition's args declare; ((), ()) when it declares nothing."""
    return (tuple(args.get(FREES) or ()), tuple(args.get(LOADS) or ())) if args else ((), ())
