"""The parts of a trace `rldbg report`'s analyses read (rldbg.trace.report), keyed by role and
rank: rldbg's slices (worker calls, transitions, driver calls, steps), each rank's memory and
ledger counter series, the metadata naming processes and ranks, and the few instants an analysis
looks at. Built a piece at a time as rldbg.trace.load_pieces reads the file, so that the events
themselves are dropped as soon as their part is taken.
"""
from __future__ import annotations

import re
from collections import defaultdict

from rldbg import sentinel
from rldbg.trace.load import TraceFileError, phases, ts_ns
from rldbg.trace.load_pieces import read_by_phase

_RANK_COUNTER = re.compile(r"^rank (\d+) (memory|ledger)$")


def process_names(meta: list) -> dict:
    """pid -> role, from the process_name metadata."""
    return {e["pid"]: e["args"].get("name") for e in meta
            if e.get("ph") == "M" and e.get("name") == "process_name" and e.get("args") and "pid" in e}


# The instants an analysis reads (the rest, user marks among them, are not kept).
_TRACE_START, _LOSSES = "rldbg trace start", "rldbg trace losses"
_KEPT_INSTANTS = frozenset((_TRACE_START, _LOSSES, sentinel.EVENT))
_DROPPED = "rldbg dropped events"   # the exporter's counter of events dropped before shipping


def _ns(v) -> int:
    """A Chrome µs time as ns; rldbg's own "123.456" is read as its digits (exact, and 3x
    faster than ts_ns()), anything else by ts_ns()."""
    if type(v) is str and v[-4:-3] == ".":
        try:
            return int(v.replace(".", "", 1))
        except ValueError:   # "1.5e3": a float's text with its point in that place
            pass
    return ts_ns(v)


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
        self.meta: list = []                     # the "M" events: process and rank names
        self.instants: list = []                 # the instants in _KEPT_INSTANTS, in order
        self.dropped_total = 0                   # the last _DROPPED counter's total
        self.names: dict = {}                    # pid -> role, from the process_name metadata
        self._tracks: dict = {}   # (pid, counter name) -> where its samples go, found once per track
        self._unnamed: list = []  # (index, list, pid): slices without a role whose pid had no name yet

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
            into = lists.get(cat)
            if into is None:
                continue   # user spans and the like: not part of the analysis
            a = e.get("args") or {}
            if cat == "driver_call" and "mode" not in a:
                continue   # the dispatch/send/wait/recv parts of a driver call
            t, d = e["ts"], e.get("dur", 0)
            # rldbg's own "123.456" µs: the digits are the ns (_ns() for anything else), inline:
            # this runs for every call of a run
            try:
                t = int(t.replace(".", "")) if type(t) is str and t[-4:-3] == "." else _ns(t)
                d = int(d.replace(".", "")) if type(d) is str and d[-4:-3] == "." else _ns(d)
            except ValueError:   # "1.5e3"
                t, d = _ns(e["ts"]), _ns(e.get("dur", 0))
            if "role" in a:
                role = a["role"]
            else:
                role = names.get(e.get("pid"))
                if role is None and e.get("pid") not in names:
                    self._unnamed.append((len(into), into, e.get("pid")))
            into.append({"name": e.get("name"), "ts": t, "dur": d, "end": t + d,
                         "role": role, "rank": a.get("rank", 0),
                         "step": a.get("step"), "method": a.get("method"), "flow": a.get("flow"), "args": a})
        tracks = self._tracks
        for e in by_ph.get("C", ()):
            name, pid = e.get("name", ""), e.get("pid")
            track = (pid, name if type(name) is str else str(name))
            where = tracks.get(track)
            if where is None:
                where = tracks[track] = self._track(track)
            if where is False:
                continue
            args = e.get("args")
            if not args:
                continue
            t = e["ts"]
            try:
                t = int(t.replace(".", "")) if type(t) is str and t[-4:-3] == "." else _ns(t)
            except ValueError:
                t = _ns(t)
            if type(where) is list:   # its pid not named yet, or the exporter's drop counter
                where.append((t, args))
                continue
            series_of = where[3]
            for series, v in args.items():
                got = series_of.get(series)   # the track's list of each of its series, found once
                if got is None:
                    got = series_of[series] = where[2][(where[0], where[1], series)]
                got.append((t, v))

    def _track(self, track: tuple):
        """Where a counter track's samples go: (role, rank, self.mem or self.ledger, {series: list})
        for a rank's memory or ledger; a list to hold them until finish() for one whose process
        is not named yet, and for the drop counter; False for any other counter."""
        if track[1] == _DROPPED:
            return []
        m = _RANK_COUNTER.match(track[1])
        if not m:
            return False
        role = self.names.get(track[0])
        if role is None:
            return []
        return role, int(m.group(1)), self.mem if m.group(2) == "memory" else self.ledger, {}

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
        for d, o in ((self.mem, later.mem), (self.ledger, later.ledger)):
            for k, v in o.items():
                d[k] += v   # finish() sorts
        self.meta += later.meta
        self.names.update(later.names)
        self.instants += later.instants
        for track, held in later._tracks.items():
            if type(held) is not list:   # its samples are in later.mem / later.ledger, merged above
                continue
            where = self._tracks.get(track)
            if where is None:
                self._tracks[track] = held
            elif type(where) is list:
                where += held
            elif where is not False:   # named here after the other process started: placed now
                for t, args in held:
                    for series, v in args.items():
                        where[2][(where[0], where[1], series)].append((t, v))

    def finish(self) -> "Trace":
        """After the last add(): the roles and counter samples that waited for a process's name,
        and the series sorted by time."""
        names = self.names
        for i, into, pid in self._unnamed:
            into[i]["role"] = names.get(pid)
        self._unnamed = []
        for track, where in list(self._tracks.items()):
            if type(where) is not list:
                continue
            if track[1] == _DROPPED:
                if where:
                    self.dropped_total = (where[-1][1] or {}).get("total") or 0
                continue
            self._tracks[track] = None
            resolved = self._track(track)
            if type(resolved) is tuple:
                for t, args in where:
                    for series, v in args.items():
                        resolved[2][(resolved[0], resolved[1], series)].append((t, v))
        for d in (self.mem, self.ledger):
            for v in d.values():
                v.sort()
        return self

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
    t.path, t.notes = path, notes
    return t
