"""What `rldbg report`'s analyses read (rldbg.trace.report), keyed by role and rank, as the store's
queries hand it over (rldbg.store.queries): rldbg's slices (worker calls, transitions, driver
calls, steps) as records {name, ts, dur, end, role, rank, step, method, flow, args}, each rank's
memory and ledger series and each GPU's as (times, values) columns, the tracks' processes, the few
instants an analysis looks at as records {name, ts, role, rank, args}, and what the trace says
about itself (its start record's args, its drop total). Times are ns on the trace's clock, from its origin.

The rule for what the analyses may take for granted in a slice record (the types rldbg writes), and for a counter sample
(a finite number), is written here once and applied as a store is written (rldbg.store.ingest,
rldbg.store.chrome_import, rldbg.store.series): records that break it are left out and counted in the report's damage
notes rather than failing a sort or a sum deep inside an analysis.
"""
from __future__ import annotations

import sys

from rldbg.store import TraceFileError

_NONE = type(None)
# bool is not an int here (JSON's true).
_RECORD_TYPES = (("name", {str}), ("rank", {int}), ("step", {int, _NONE}), ("method", {str, _NONE}),
                 ("flow", {int, str, _NONE}))
_MEM_ARGS = ("mem_before", "mem_after")   # numbers or null
_NAME_LISTS = ("frees", "loads")          # rldbg.trace.events.moves(): lists of ledger categories, or null
_LISTS = (list, tuple)                    # a JSON array, as a spill may hold it too
_FLOAT_MAX = sys.float_info.max
INT64 = 1 << 63   # a rank or step beyond 64 bits is none rldbg writes, nor one SQLite holds as a number
LOSSES = "rldbg trace losses"


def finite_number(v) -> bool:
    """An int or a float (not a bool), finite and within a float's range: a trace from elsewhere
    may hold NaN, Infinity and 10**400, which the memory arithmetic and the charts cannot take."""
    t = type(v)
    return (t is int and -_FLOAT_MAX <= v <= _FLOAT_MAX) or (t is float and v - v == 0.0)   # inf - inf: nan


def bad_field(r: dict) -> str | None:
    """The first field of a slice record that breaks the rule above, or None."""
    for k, ok in _RECORD_TYPES:
        v = r[k]
        if type(v) not in ok or k in ("rank", "step") and type(v) is int and not -INT64 <= v < INT64:
            return k
    a = r["args"]
    for k in _MEM_ARGS:
        v = a.get(k)
        if v is not None and not finite_number(v):
            return k
    for k in _NAME_LISTS:
        v = a.get(k)
        if v is not None and not (type(v) in _LISTS and all(type(x) is str for x in v)):
            return k
    return None


def odd_notes(odd_fields: dict, odd_samples: int) -> list[str]:
    """The damage notes for what bad_field() and finite_number() left out."""
    notes = []
    if odd_fields:
        notes.append(f"{sum(odd_fields.values())} rldbg slice(s) skipped for a field of a type rldbg does not write "
                     f"({', '.join(f'{k} {n}' for k, n in sorted(odd_fields.items()))})")
    if odd_samples:
        notes.append(f"{odd_samples} counter sample(s) skipped: a value that is not a number")
    return notes


class Trace:
    """The analyses' input (module docstring); rldbg.store.queries.read() fills it."""

    def __init__(self):
        self.calls, self.transitions, self.driver_calls, self.steps = [], [], [], []
        self.mem: dict = {}                      # (role, rank, series) -> (times, values) in time order
        self.ledger: dict = {}                   # (role, rank, category) -> (times, values)
        self.gpus: dict = {}                     # (node id, "gpu0") -> {series: (times, values)}
        self.ranks: list = []                    # [{role, rank, node, ip, pid}] of the tracks' processes
        self.start: dict = {}                    # the trace start record's args: clock, what was recorded
        self.instants: list = []                 # the instants an analysis reads, in time order
        self.dropped_total = 0                   # events the processes dropped before shipping
        self.path = ""
        self.store = ""                          # the store beside the Perfetto file given, when read through it
        self.notes: list = []                    # damage the reading met, one line per kind

    def check(self) -> None:
        """TraceFileError unless the trace holds what the analysis is about."""
        if not (self.calls or self.driver_calls or self.transitions):
            raise TraceFileError("no rldbg events in this trace (no worker-call, driver-call or transition "
                                 "slices); was it written by `rldbg export` / rldbg.trace.stop()?")

    def loss_summary(self) -> dict | None:
        """The args of the trace's last "rldbg trace losses" record (rldbg.trace.collector), or None."""
        return next((e["args"] for e in reversed(self.instants) if e["name"] == LOSSES), None)

    def mem_series(self, role, rank) -> tuple:
        """The (times, values) of the rank's memory as the device shows it, else as its process does."""
        for series in ("device_used", "cuda_allocated", "rss"):
            if (role, rank, series) in self.mem:
                return self.mem[(role, rank, series)]
        return [], []
