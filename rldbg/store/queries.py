"""What the report asks of a store (rldbg.store.schema): the Trace its analyses read (rldbg.trace.report_trace): the
slices and instants they need from the report's rows (copied from the events and checked as the store is written:
rldbg.store.ingest), the counter series as the store keeps them (rldbg.store.series); the rest of a run's events (user
spans, marks, a driver call's parts) is never read.
"""
from __future__ import annotations

import sqlite3

from rldbg import sentinel
from rldbg.store import no_gc, schema, series
from rldbg.store.schema import raw_args
from rldbg.trace.events import BREAKPOINT, NUMBERED_AFTER, TRIGGER
from rldbg.trace.report_trace import LOSSES, Trace, odd_notes
from rldbg.trace.window import STACK

STEP_START = "step start"
KEPT_INSTANTS = (sentinel.EVENT, TRIGGER, STACK, STEP_START, LOSSES, BREAKPOINT)
SLICE_CATS = ("call", "transition", "step", "driver_call")

_KINDS = "SELECT id, proc, ph, cat, name, role, rank, method FROM kinds"
_ROWS = "SELECT kind, ts, dur, step, flow, args FROM report_rows ORDER BY rowid"   # in arrival order
_RANKS = """SELECT t.role, t.rank, p.node_id, p.node_ip, p.pid FROM tracks t JOIN processes p ON p.id = t.proc
WHERE p.node_id IS NOT NULL ORDER BY t.ord"""


def reads(ph, cat, name) -> bool:
    """Whether the report reads the events of a kind (ph, cat, name), besides the counter series
    (rldbg.store.series): rldbg's slices and driver calls and the few instants an analysis looks
    at. The writer keeps their events in report_rows by it, the reader picks their kinds by it."""
    return ph in ("X", "D") and cat in SLICE_CATS or ph in ("i", "I") and name in KEPT_INSTANTS


def read(conn: sqlite3.Connection, path: str = "") -> Trace:
    """The Trace of the store open on `conn` (`path`: what the report names it by)."""
    t = Trace()
    t.path = path
    # The driver's process has a track per controller: its rank is the track (rldbg.store.tracks).
    ranks = conn.execute(_RANKS).fetchall()
    t.ranks = sorted(({"role": role, "rank": rank, "node": str(node or ""), "ip": str(ip or ""), "pid": pid}
                      for role, rank, node, ip, pid in ranks),
                     key=lambda r: (r["role"] != "driver", r["role"], r["rank"]))
    with no_gc():
        _events(conn, t)
        series.read(conn, t)
    t.start = schema.get(conn, "start") or {}
    t.dropped_total = schema.get(conn, "dropped_total") or 0
    t.notes = list(schema.get(conn, "notes") or []) + odd_notes(schema.get(conn, "odd_fields") or {},
                                                                schema.get(conn, "odd_samples") or 0)
    _one_controllers_steps(t)
    _close_open_steps(t)
    _number_after_the_fact(t)
    return t


def _events(conn, t: Trace) -> None:
    """The Trace's slices and instants from the report's rows (checked when the store was written)."""
    shift = dict(conn.execute("SELECT id, shift FROM processes"))
    slices = {"call": t.calls, "transition": t.transitions, "step": t.steps, "driver_call": t.driver_calls}
    kinds, rows = {}, {id(into): [] for into in (*slices.values(), t.instants)}
    for kind, proc, ph, cat, name, role, rank, method in conn.execute(_KINDS):
        if not reads(ph, cat, name):
            continue
        if ph == "D":   # a driver call as recorded: its slice in the export is named by its method
            into, name = t.driver_calls, method
        else:
            into = slices[cat] if ph == "X" else t.instants
        kinds[kind] = (ph in ("i", "I"), name, role, rank, method, shift[proc], into, rows[id(into)])
    # The rows gathered by the list they go to, so that each list's records are made one after
    # another: a pass over one list (every analysis makes some) then reads memory in a row.
    for row in conn.execute(_ROWS):
        kinds[row[0]][7].append(row)
    for kind, ts, dur, step, flow, text in [row for got in rows.values() for row in got]:
        instant, name, role, rank, method, sh, into, _ = kinds[kind]
        ts += sh
        a = raw_args(text)
        if type(a) is not dict:   # none, or args that are not a map: kept whole, as the export lays them out
            a = {} if a is None else {"value": a}
        if instant:
            # The layout's role, rank and step win over the instant's own args, as in the export.
            into.append({"name": name, "ts": ts, "role": role, "rank": rank,
                         "args": dict(a, role=role, rank=rank, step=step)})
        else:
            into.append({"name": name, "ts": ts, "dur": dur, "end": ts + dur, "role": role, "rank": rank,
                         "step": step, "method": method, "flow": flow, "args": a})
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
        end = max((c["end"] for c in (*t.driver_calls, *t.calls, *t.transitions) if c["step"] == n), default=e["ts"])
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
