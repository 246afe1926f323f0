"""The parts of a trace `rldbg report`'s analyses read (rldbg.trace.report), keyed by role and
rank: rldbg's slices (worker calls, transitions, driver calls, steps), each rank's memory and
ledger counter series, the metadata naming processes and ranks, and the few instants an analysis
looks at. Built a piece at a time as rldbg.trace.load_pieces reads the file, so that the events
themselves are dropped as soon as their part is taken.
"""
from __future__ import annotations

import re
import sys
from collections import defaultdict

from rldbg import sentinel
from rldbg.trace.events import FREES, LOADS, NUMBERED_AFTER
from rldbg.trace.flight import TRIGGER
from rldbg.trace.window import STACK
from rldbg.trace.load import TraceFileError, phases, ts_ns
from rldbg.trace.load_pieces import read_by_phase

_RANK_COUNTER = re.compile(r"^rank (\d+) (memory|ledger)$")
# A GPU's own counter, recorded by the memory sampler of each rank on it (rldbg.memory.sampler).
_GPU_COUNTER = re.compile(r"^rank (\d+) (gpu\d+) memory$")


def process_names(meta: list) -> dict:
    """pid -> role, from the process_name metadata (a name that is not a string names nothing,
    nor does a pid that cannot be a key: a list)."""
    return {e["pid"]: e["args"]["name"] for e in meta
            if e.get("ph") == "M" and e.get("name") == "process_name" and e.get("args") and "pid" in e
            and type(e["args"].get("name")) is str and type(e["pid"]).__hash__ is not None}


def role_of_pid(names: dict, pid):
    """The role names[pid] gives, None for a pid never named or one that cannot be a key."""
    try:
        return names.get(pid)
    except TypeError:   # an unhashable pid (a list): no process_name can name it
        return None


def _role(role, pid) -> str:
    """A slice's role as the analyses sort and print it: a string, also where the slice's args
    name none (None) and its process was never named, or name something else."""
    return role if type(role) is str else f"pid {pid}" if role is None else str(role)


# The instants an analysis reads (the rest, user marks among them, are not kept).
_TRACE_START, _LOSSES, _STEP_START = "rldbg trace start", "rldbg trace losses", "step start"
_KEPT_INSTANTS = frozenset((_TRACE_START, _LOSSES, _STEP_START, sentinel.EVENT, TRIGGER, STACK))

# The slices an analysis reads, by cat: all of them, or only those whose args have the key named
# (a driver call's dispatch/send/wait/recv parts have no "mode" and are not kept).
_KEPT_SLICES = {"call": None, "transition": None, "step": None, "driver_call": "mode"}
_DROPPED = "rldbg dropped events"   # the exporter's counter of events dropped before shipping


def _wanted_counter(name: str) -> bool:
    """The counter tracks an analysis reads: a rank's memory or ledger, and the drop counter."""
    return name == _DROPPED or _RANK_COUNTER.match(name) is not None or _GPU_COUNTER.match(name) is not None


def _ns(v) -> int:
    """A Chrome µs time as ns; rldbg's own "123.456" is read as its digits (exact, and 3x
    faster than ts_ns()), anything else by ts_ns()."""
    if type(v) is str and v[-4:-3] == ".":
        try:
            return int(v.replace(".", "", 1))
        except ValueError:   # "1.5e3": a float's text with its point in that place
            pass
    return ts_ns(v)


# What the analyses may take for granted in a kept slice's record (the types rldbg's exporter
# writes): sorting, summing and keying by these fields then cannot fail. A slice from an edited or
# foreign trace with anything else is skipped and counted in the report's damage notes, where
# before it failed a sort or a sum deep inside an analysis. bool is not an int here (JSON's true).
# Trace.add() applies the rule to what it reads.
_NONE = type(None)
_RECORD_TYPES = (("name", {str}), ("rank", {int}), ("step", {int, _NONE}), ("method", {str, _NONE}),
                 ("flow", {int, str, _NONE}))
_MEM_ARGS = ("mem_before", "mem_after")   # numbers or null
_NAME_LISTS = (FREES, LOADS)   # rldbg.trace.events.moves(): lists of ledger categories, or null
_FLOAT_MAX = sys.float_info.max


def finite_number(v) -> bool:
    """An int or a float (not a bool), finite and within a float's range: json.loads, the
    tolerant reader, reads NaN, Infinity and 10**400, which the memory arithmetic and the charts
    cannot take. Counter samples (add()) and memory readings (_bad_field()) must be such."""
    t = type(v)
    return (t is int and -_FLOAT_MAX <= v <= _FLOAT_MAX) or (t is float and v - v == 0.0)   # inf - inf: nan


def _bad_field(r: dict) -> str | None:
    """The first field of a record that breaks the rule above, or None."""
    for k, ok in _RECORD_TYPES:
        if type(r[k]) not in ok:
            return k
    a = r["args"]
    for k in _MEM_ARGS:
        v = a.get(k)
        if v is not None and not finite_number(v):
            return k
    for k in _NAME_LISTS:
        v = a.get(k)
        if v is not None and not (type(v) is list and all(type(x) is str for x in v)):
            return k
    return None


class Trace:
    """The parts of a trace the analysis needs, keyed by role and rank. Built from all the
    events at once (Trace(events) or Trace((), by_phase)), or a piece at a time: Trace.empty(),
    add() each piece's events by phase, then finish() (rldbg.trace.load_pieces); pieces read in
    another process go to a spawn() and come back by merge()."""

    def __init__(self, events: list[dict], by_ph: dict | None = None):
        """From loaded events, or their split by phase (rldbg.trace.load.phases) when at hand."""
        self._begin()
        self.add(by_ph if by_ph is not None else phases(events)[0])
        self.finish()
        self.check()

    @classmethod
    def empty(cls) -> "Trace":
        t = cls.__new__(cls)
        t._begin()
        return t

    def _begin(self) -> None:
        self.calls, self.transitions, self.driver_calls, self.steps = [], [], [], []
        self.mem: dict = defaultdict(list)       # (role, rank, series) -> [(ts, value)]
        self.ledger: dict = defaultdict(list)    # (role, rank, category) -> [(ts, value)]
        self.gpus: dict = {}                     # (node id, "gpu0") -> {series: [(ts, value)]}
        self.meta: list = []                     # the "M" events: process and rank names
        self.instants: list = []                 # the instants in _KEPT_INSTANTS, in order
        self.dropped_total = 0                   # the _DROPPED counter's latest total
        self.names: dict = {}                    # pid -> role, from the process_name metadata
        # (pid, counter name) -> {series: [(ts, value)]} as read, or False for a track no analysis
        # reads; placed by role and rank in finish(), once every process is named
        self.counters: dict = {}
        self._unnamed: list = []  # (index, list, pid): slices without a role whose pid had no name yet
        self.odd_fields: dict = {}   # field -> kept slices skipped for it (_bad_field())
        self.odd_samples = 0         # counter samples skipped for not being numbers

    def add(self, by_ph: dict) -> None:
        """One piece of the trace's valid events by phase (rldbg.trace.load.phases)."""
        meta = by_ph.get("M")
        if meta:
            self.meta += meta
            self.names.update(process_names(meta))
        names, kept = self.names, _KEPT_INSTANTS
        for ph in ("i", "I"):
            self.instants += [e for e in by_ph.get(ph, ()) if type(n := e.get("name")) is str and n in kept]
        lists = {"call": self.calls, "transition": self.transitions, "driver_call": self.driver_calls,
                 "step": self.steps}
        for e in by_ph.get("X", ()):
            cat = e.get("cat")
            if type(cat) is not str or cat not in lists:
                continue   # user spans and the like: not part of the analysis
            into = lists[cat]
            a = e.get("args") or {}
            need = _KEPT_SLICES[cat]
            if need is not None and need not in a:
                continue   # the dispatch/send/wait/recv parts of a driver call
            t, d = e["ts"], e.get("dur", 0)
            # rldbg's own "123.456" µs: the digits are the ns (_ns() for anything else), inline:
            # this runs for every call of a run
            try:
                t = int(t.replace(".", "")) if type(t) is str and t[-4:-3] == "." else _ns(t)
                d = int(d.replace(".", "")) if type(d) is str and d[-4:-3] == "." else _ns(d)
            except ValueError:   # "1.5e3"
                t, d = _ns(e["ts"]), _ns(e.get("dur", 0))
            # a string, or None: the process is not named yet
            role = _role(a["role"], e.get("pid")) if "role" in a else role_of_pid(names, e.get("pid"))
            rec = {"name": e.get("name"), "ts": t, "dur": d, "end": t + d, "role": role, "rank": a.get("rank", 0),
                   "step": a.get("step"), "method": a.get("method"), "flow": a.get("flow"), "args": a}
            odd = _bad_field(rec)
            if odd is not None:
                self.odd_fields[odd] = self.odd_fields.get(odd, 0) + 1
                continue
            if role is None:
                self._unnamed.append((len(into), into, e.get("pid")))
            into.append(rec)
        counters = self.counters
        for e in by_ph.get("C", ()):
            args = e.get("args")
            if not args:
                continue
            name, pid = e.get("name", ""), e.get("pid")
            track = (pid, name if type(name) is str else str(name))
            series_of = counters.get(track)
            if series_of is None:
                series_of = counters[track] = {} if _wanted_counter(track[1]) else False
            if series_of is False:
                continue
            t = e["ts"]
            try:
                t = int(t.replace(".", "")) if type(t) is str and t[-4:-3] == "." else _ns(t)
            except ValueError:
                t = _ns(t)
            for series, v in args.items():
                if not finite_number(v):
                    self.odd_samples += 1
                    continue
                got = series_of.get(series)
                if got is None:
                    got = series_of[series] = []
                got.append((t, v))

    def spawn(self) -> "Trace":
        """An empty Trace for the pieces after this one's, knowing the processes named so far
        (rldbg.trace.load_pieces reads them in another process)."""
        t = Trace.empty()
        t.names = dict(self.names)
        return t

    def merge(self, later: "Trace") -> None:
        """Appends what `later` (this one's spawn(), fed the pieces after those fed here) took;
        before finish()."""
        pairs = ((self.calls, later.calls), (self.transitions, later.transitions),
                 (self.driver_calls, later.driver_calls), (self.steps, later.steps))
        mine = {id(b): (a, len(a)) for a, b in pairs}
        for i, into, pid in later._unnamed:
            a, n = mine[id(into)]
            self._unnamed.append((n + i, a, pid))
        for a, b in pairs:
            a += b
        self.meta += later.meta
        self.names.update(later.names)
        for k, n in later.odd_fields.items():
            self.odd_fields[k] = self.odd_fields.get(k, 0) + n
        self.odd_samples += later.odd_samples
        self.instants += later.instants
        for track, series_of in later.counters.items():
            mine = self.counters.get(track)
            if mine is None:
                self.counters[track] = series_of
            elif mine is not False:
                for series, samples in series_of.items():
                    got = mine.get(series)
                    if got is None:
                        mine[series] = samples
                    else:
                        got += samples

    def finish(self) -> "Trace":
        """After the last add(): the roles and counter samples that waited for a process's name,
        and the series sorted by time."""
        names = self.names
        for i, into, pid in self._unnamed:
            into[i]["role"] = _role(role_of_pid(names, pid), pid)
        self._unnamed = []
        # what was skipped for not having rldbg's types: read_trace() adds it to the damage notes
        self.damage = []
        if self.odd_fields:
            self.damage.append(f"{sum(self.odd_fields.values())} rldbg slice(s) skipped for a field of a type rldbg "
                               f"does not write ({', '.join(f'{k} {n}' for k, n in sorted(self.odd_fields.items()))})")
        if self.odd_samples:
            self.damage.append(f"{self.odd_samples} counter sample(s) skipped: a value that is not a number")
        nodes = {(e.get("pid"), e.get("tid")): str((e.get("args") or {}).get("node_id") or "")
                 for e in self.meta if e.get("name") == "thread_name" and type(e.get("tid")) is int
                 and type(e.get("pid")).__hash__ is not None}
        for (pid, name), series_of in self.counters.items():
            if not series_of:
                continue
            if name == _DROPPED:
                total = sorted(series_of.get("total") or ())
                if total:   # the latest total (the counter only grows)
                    self.dropped_total = total[-1][1] or 0
                continue
            m, role = _RANK_COUNTER.match(name), names.get(pid)
            if m is None:
                g = _GPU_COUNTER.match(name)
                into = self.gpus.setdefault((nodes.get((pid, int(g.group(1)) + 1), ""), g.group(2)), {})
                for series, samples in series_of.items():
                    into.setdefault(series, []).extend(samples)
                continue
            if role is None:
                continue   # a process never named: its samples belong to no role
            into = self.mem if m.group(2) == "memory" else self.ledger
            rank = int(m.group(1))
            for series, samples in series_of.items():
                into[(role, rank, series)] += samples
        self.counters = {}
        for d in (self.mem, self.ledger, *self.gpus.values()):
            for v in d.values():
                v.sort()
        self._one_controllers_steps()
        self._close_open_steps()
        self._number_after_the_fact()
        return self

    def _one_controllers_steps(self) -> None:
        """A job's steps are one controller's. With several (an evaluation actor beside VeRL's
        TaskRunner learns steps from its own call order too), each has its track on the driver's
        process (rldbg.trace.export) and the steps kept are the first track's that marks any."""
        def track(a) -> int:
            r = a.get("rank", 0)
            return r if type(r) is int else 0
        starts = [e for e in self.instants if e.get("name") == _STEP_START]
        tracks = {track(s) for s in self.steps} | {track(e.get("args") or {}) for e in starts}
        if len(tracks) < 2:
            return
        keep = min(tracks)
        self.steps = [s for s in self.steps if track(s) == keep]
        self.instants = [e for e in self.instants if e.get("name") != _STEP_START or track(e.get("args") or {}) == keep]

    def _close_open_steps(self) -> None:
        """A step that started and never ended (its controller, a Ray actor such as VeRL's
        TaskRunner, was still in it when the trace stopped) ends with the last call that carries it."""
        closed = {s["step"] for s in self.steps}
        for e in self.instants:
            a = e.get("args") or {}
            n = a.get("step")
            if e.get("name") != _STEP_START or type(n) is not int or n in closed:
                continue
            try:
                t = _ns(e["ts"])
            except (KeyError, TypeError, ValueError):
                continue
            ends = [c["end"] for c in (*self.driver_calls, *self.calls, *self.transitions) if c["step"] == n]
            end = max(ends, default=t)
            closed.add(n)
            self.steps.append({"name": f"step {n}", "ts": t, "dur": end - t, "end": end, "role": "driver", "rank": 0,
                               "step": n, "method": None, "flow": None, "args": {"step": n, "open": True}})
        self.steps.sort(key=lambda s: s["ts"])

    def _number_after_the_fact(self) -> None:
        late = [s for s in self.steps if (s.get("args") or {}).get(NUMBERED_AFTER)]
        for s in late:
            for c in (*self.driver_calls, *self.calls, *self.transitions):
                if c["step"] is None and s["ts"] <= c["ts"] < s["end"]:
                    c["step"] = s["step"]

    def check(self) -> None:
        """TraceFileError unless the trace holds what the analysis is about."""
        if not (self.calls or self.driver_calls or self.transitions):
            raise TraceFileError("no rldbg events in this trace (no worker-call, driver-call or transition "
                                 "slices); was it written by `rldbg export` / rldbg.trace.stop()?")

    def loss_summary(self) -> dict | None:
        """The args of the trace's last "rldbg trace losses" record (rldbg.trace.collector), or None."""
        return next(((e.get("args") or {}) for e in reversed(self.instants) if e.get("name") == _LOSSES), None)

    def mem_series(self, role, rank) -> list:
        for series in ("device_used", "cuda_allocated", "rss"):
            if (role, rank, series) in self.mem:
                return self.mem[(role, rank, series)]
        return []


def read_trace(path: str, jobs: int = 1) -> Trace:
    """The Trace of a trace file, read a piece at a time, by `jobs` processes (see
    rldbg.trace.load_pieces: only a process without threads may pass more than 1); its damage
    notes (rldbg.trace.load.load_trace()'s) in .notes. TraceFileError if the file is not a trace."""
    t, notes = read_by_phase(path, Trace.empty, jobs)
    t.finish()
    t.path, t.notes = path, notes + t.damage
    return t
