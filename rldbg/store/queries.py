"""What the report asks of a store (rldbg.store.schema): the Trace its analyses read
(rldbg.trace.report_trace), in three queries over the categories and instants they need; the rest
of a run's events (user spans, marks, a driver call's parts) is never read.
"""
from __future__ import annotations

import re
import sqlite3

from rldbg import sentinel
from rldbg.store import schema
from rldbg.store.schema import raw_args
from rldbg.trace.events import NUMBERED_AFTER
from rldbg.trace.flight import TRIGGER
from rldbg.trace.load import no_gc
from rldbg.trace.report_trace import LOSSES, Trace, bad_field, odd_notes
from rldbg.trace.window import STACK

STEP_START = "step start"
KEPT_INSTANTS = (sentinel.EVENT, TRIGGER, STACK, STEP_START, LOSSES)
_SLICE_CATS = ("call", "transition", "step", "driver_call")
_GPU_COUNTER = re.compile(r"^(gpu\d+) memory$")

# Through the index on cat (events_cat), without a join or a sort: the index holds each category's
# rows in arrival order (an index entry is (cat, seq)), which is the order each record list keeps;
# a process's clock shift is added here, from the few rows of the processes table.
_SLICES = f"""SELECT proc, ph, cat, name, ts, dur, role, rank, step, method, flow, args FROM events
INDEXED BY events_cat WHERE cat IN ({",".join("?" * len(_SLICE_CATS))})"""
_COUNTERS = """SELECT proc, cat, name, ts, role, rank, args FROM events INDEXED BY events_cat
WHERE cat IN ('memory', 'ledger', 'gpu') AND ph = 'C'"""
# Through the index of instants by name (events_instants: its WHERE is this query's first term).
_INSTANTS = f"""SELECT proc, name, ts, role, rank, step, args FROM events
WHERE ph IN ('i', 'I') AND name IN ({",".join("?" * len(KEPT_INSTANTS))}) ORDER BY seq"""
_RANKS = """SELECT t.role, t.rank, p.node_id, p.node_ip, p.pid FROM tracks t JOIN processes p ON p.id = t.proc
WHERE p.node_id IS NOT NULL ORDER BY t.ord"""


def args_of(text):
    """An event's args from the store's JSON text: a dict ({} for none; args that are not a
    map kept whole under "value", as the export lays them out)."""
    a = raw_args(text)
    return a if type(a) is dict else {} if a is None else {"value": a}


def read(conn: sqlite3.Connection, path: str = "") -> Trace:
    """The Trace of the store open on `conn` (`path`: what the report names it by)."""
    t = Trace()
    t.path = path
    odd = dict(schema.get(conn, "odd_fields") or {})
    with no_gc():
        _slices(conn, t, odd)
        odd_samples = _counters(conn, t) + (schema.get(conn, "odd_samples") or 0)
        _instants(conn, t)
    # The driver's process has a track per controller: its rank is the track (rldbg.store.tracks).
    t.ranks = sorted(({"role": role, "rank": rank, "node": str(node or ""),
                       "ip": str(ip or ""), "pid": pid} for role, rank, node, ip, pid in conn.execute(_RANKS)),
                     key=lambda r: (r["role"] != "driver", r["role"], r["rank"]))
    t.start = schema.get(conn, "start") or {}
    t.dropped_total = schema.get(conn, "dropped_total") or 0
    t.notes = list(schema.get(conn, "notes") or []) + odd_notes(odd, odd_samples)
    _one_controllers_steps(t)
    _close_open_steps(t)
    _number_after_the_fact(t)
    return t


# The args keys bad_field() looks into: a slice without any of them (nearly every one) and with
# fields of rldbg's types passes without the call.
_CHECKED_ARGS = frozenset(("mem_before", "mem_after", "frees", "loads"))
_FLOW_TYPES = (int, str)
_FLOAT_MAX = 1.7976931348623157e308


def _shifts(conn) -> dict:
    """proc -> ns to add to its events' ts (its clock offset less the trace's origin)."""
    return dict(conn.execute("SELECT id, shift FROM processes"))


def _slices(conn, t: Trace, odd: dict) -> None:
    into = {"call": t.calls, "transition": t.transitions, "step": t.steps, "driver_call": t.driver_calls}
    checked = _CHECKED_ARGS.isdisjoint
    shift = _shifts(conn)
    for proc, ph, cat, name, ts, dur, role, rank, step, method, flow, text in conn.execute(_SLICES, _SLICE_CATS):
        ts += shift[proc]
        if ph == "D":   # a driver call as recorded: its slice in the export is named by its method
            lst, name = t.driver_calls, method
        elif ph == "X":
            lst = into[cat]
        else:
            continue
        a = args_of(text)
        if cat == "driver_call" and "mode" not in a:
            continue   # an imported trace's dispatch/send/wait/recv parts of a driver call
        rec = {"name": name, "ts": ts, "dur": dur, "end": ts + dur, "role": role, "rank": rank, "step": step,
               "method": method, "flow": flow, "args": a}
        if not (type(name) is str and type(rank) is int and (step is None or type(step) is int)
                and (method is None or type(method) is str) and (flow is None or type(flow) in _FLOW_TYPES)
                and checked(a)):
            why = bad_field(rec)
            if why is not None:
                odd[why] = odd.get(why, 0) + 1
                continue
        lst.append(rec)


def _counters(conn, t: Trace) -> int:
    """The memory, ledger and GPU series; returns how many samples were not numbers."""
    odd = 0
    nodes = {(role, rank): str(node or "") for role, rank, node, _, _ in conn.execute(_RANKS)}
    gpus: dict = {}
    series_by_cat = {"memory": t.mem, "ledger": t.ledger}
    shift = _shifts(conn)
    for proc, cat, name, ts, role, rank, text in conn.execute(_COUNTERS):
        ts += shift[proc]
        if cat == "gpu":
            g = _GPU_COUNTER.match(name) if type(name) is str else None
            if g is None:
                continue
            key = (role, rank, g.group(1))
            into = gpus.get(key)
            if into is None:
                into = gpus[key] = t.gpus.setdefault((nodes.get((role, rank), ""), g.group(1)), {})
            into = {s: into.setdefault(s, []) for s in args_of(text)}
        elif role is None or type(rank) is not int:
            continue   # a process never named: its samples belong to no role
        else:
            into = None
            by = series_by_cat[cat]
        for series, v in args_of(text).items():
            tv = type(v)
            # finite_number(), inline: this runs for every sample of a run
            if not ((tv is float and v - v == 0.0) or (tv is int and -_FLOAT_MAX <= v <= _FLOAT_MAX)):
                odd += 1
                continue
            (into[series] if into is not None else by[(role, rank, series)]).append((ts, v))
    for d in (t.mem, t.ledger, *t.gpus.values()):
        for v in d.values():
            v.sort()
    return odd


def _instants(conn, t: Trace) -> None:
    shift = _shifts(conn)
    for proc, name, ts, role, rank, step, text in conn.execute(_INSTANTS, KEPT_INSTANTS):
        # The layout's role, rank and step win over the instant's own args, as in the export.
        t.instants.append({"name": name, "ts": ts + shift[proc], "role": role, "rank": rank,
                           "args": dict(args_of(text), role=role, rank=rank, step=step)})
    t.instants.sort(key=lambda e: e["ts"])   # stable: arrival order among equal times


def _one_controllers_steps(t: Trace) -> None:
    """A job's steps are one controller's. With several (an evaluation actor beside VeRL's
    TaskRunner learns steps from its own call order too), each has its track on the driver's
    process (rldbg.store.tracks) and the steps kept are the first track's that marks any."""
    def track(r) -> int:
        return r if type(r) is int else 0
    tracks = {track(s["rank"]) for s in t.steps} | {
        track(e["args"].get("rank")) for e in t.instants if e["name"] == STEP_START}
    if len(tracks) < 2:
        return
    keep = min(tracks)
    t.steps = [s for s in t.steps if track(s["rank"]) == keep]
    t.instants = [e for e in t.instants if e["name"] != STEP_START or track(e["args"].get("rank")) == keep]


def _close_open_steps(t: Trace) -> None:
    """A step that started and never ended (its controller, a Ray actor such as VeRL's
    TaskRunner, was still in it when the trace stopped) ends with the last call that carries it."""
    closed = {s["step"] for s in t.steps}
    for e in t.instants:
        n = e["args"].get("step")
        if e["name"] != STEP_START or type(n) is not int or n in closed:
            continue
        ends = [c["end"] for c in (*t.driver_calls, *t.calls, *t.transitions) if c["step"] == n]
        end = max(ends, default=e["ts"])
        closed.add(n)
        t.steps.append({"name": f"step {n}", "ts": e["ts"], "dur": end - e["ts"], "end": end, "role": "driver",
                        "rank": 0, "step": n, "method": None, "flow": None, "args": {"step": n, "open": True}})
    t.steps.sort(key=lambda s: s["ts"])


def _number_after_the_fact(t: Trace) -> None:
    """Calls recorded before their step was known take the number of the step slice around them."""
    late = [s for s in t.steps if s["args"].get(NUMBERED_AFTER)]
    for s in late:
        for c in (*t.driver_calls, *t.calls, *t.transitions):
            if c["step"] is None and s["ts"] <= c["ts"] < s["end"]:
                c["step"] = s["step"]
