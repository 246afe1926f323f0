"""What a trace says about a run: where step time goes, who straggles, how long the controller
idles between calls, memory peaks per phase, and leak suspicions (the one rule in rldbg.memory.leaks).

Works on the exported Chrome JSON (rldbg's own layout: see chrome_text.py), so a trace copied off a
cluster can be analysed anywhere.
"""
from __future__ import annotations

import bisect
import contextlib
import re
import statistics
from collections import defaultdict

from rldbg import sentinel
from rldbg.memory.leaks import describe, leak_suspicions, observe
from rldbg.trace.events import moves
from rldbg.trace.forked import Forked, HelperLost
from rldbg.trace.load import TraceFileError, no_gc, phases, ts_ns
from rldbg.trace.load_pieces import read_by_phase

# Slices from which the memory peaks are worth a forked helper (about 3 µs a slice here, and a
# fork of a report holding a big trace costs tens of ms).
PEAKS_APART = 50_000
STRAGGLER_RATIO = 1.5
# A straggler is named only with evidence: at least this many calls (a one-off init_model that
# took 1.8x its peer is noise), and a median excess over its peers a person would care about.
STRAGGLER_MIN_CALLS = 3
STRAGGLER_MIN_EXCESS_NS = 5_000_000
_RANK_COUNTER = re.compile(r"^rank (\d+) (memory|ledger)$")


class Cover:
    """The union of some intervals, merged once, answering "how much of [lo, hi) do they
    cover" in O(log n): a long run has 10^4 steps and 10^5 calls, and clipping every call
    against every step took minutes."""

    def __init__(self, intervals):
        starts, ends = [], []
        for a, b in sorted(intervals):
            if b <= a:
                continue
            if ends and a <= ends[-1]:
                ends[-1] = max(ends[-1], b)
            else:
                starts.append(a)
                ends.append(b)
        self.starts, self.ends = starts, ends
        self.pre = [0]   # pre[k]: covered length of the first k merged intervals
        for a, b in zip(starts, ends):
            self.pre.append(self.pre[-1] + b - a)

    def within(self, lo: int, hi: int) -> int:
        """Covered length of [lo, hi)."""
        i = bisect.bisect_right(self.ends, lo)     # the first interval ending after lo
        j = bisect.bisect_left(self.starts, hi)    # the first interval starting at or after hi
        if hi <= lo or i >= j:
            return 0
        return self.pre[j] - self.pre[i] - max(lo - self.starts[i], 0) - max(self.ends[j - 1] - hi, 0)

    def of(self, windows: "Cover") -> int:
        """Covered length of what `windows` covers."""
        return sum(self.within(a, b) for a, b in zip(windows.starts, windows.ends))


def _names(meta: list) -> dict:
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
            self.names.update(_names(meta))
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


def _windows(t: Trace) -> list:
    if t.steps:
        return [(s["ts"], s["end"]) for s in t.steps]
    spans = t.calls + t.driver_calls + t.transitions
    return [(min(s["ts"] for s in spans), max(s["end"] for s in spans))]


def role_shares(t: Trace) -> dict:
    windows = _windows(t)
    total = sum(b - a for a, b in windows) or 1
    by_role = defaultdict(list)
    for c in t.calls:
        by_role[c["role"]].append((c["ts"], c["end"]))
    steps = Cover(windows)
    busy = {role: Cover(iv).of(steps) for role, iv in sorted(by_role.items())}
    out = {role: {"busy_s": b / 1e9, "share": b / total} for role, b in busy.items()}
    return {"step_time_s": total / 1e9, "steps": len(t.steps), "roles": out}


def stragglers(t: Trace, ratio: float = STRAGGLER_RATIO) -> dict:
    per_call = defaultdict(dict)
    for c in t.calls:
        if c["flow"] is not None:
            per_call[(c["role"], c["method"], c["flow"])][c["rank"]] = c["dur"]
    ratios = defaultdict(list)            # (role, method, rank) -> [dur / median of peers]
    excess = defaultdict(list)            # (role, method, rank) -> [dur - median of peers], ns
    skew = defaultdict(list)              # (role, method) -> [max / min]
    for (role, method, _), durs in per_call.items():
        if len(durs) < 2:
            continue
        skew[(role, method)].append(max(durs.values()) / max(min(durs.values()), 1))
        for rank, d in durs.items():
            peers = statistics.median([v for r, v in durs.items() if r != rank])
            ratios[(role, method, rank)].append(d / max(peers, 1))
            excess[(role, method, rank)].append(d - peers)
    found = []
    for key, rs in sorted(ratios.items()):
        role, method, rank = key
        med = statistics.median(rs)
        if (med > ratio and len(rs) >= STRAGGLER_MIN_CALLS
                and statistics.median(excess[key]) >= STRAGGLER_MIN_EXCESS_NS):
            found.append({"role": role, "rank": rank, "method": method, "calls": len(rs),
                          "slower_than_peers": round(med, 2)})
    return {"stragglers": found,
            "skew": [{"role": r, "method": m, "calls": len(v), "mean_max_over_min": round(statistics.mean(v), 2)}
                     for (r, m), v in sorted(skew.items())]}


def controller_idle(t: Trace) -> dict:
    windows = _windows(t)
    total = sum(b - a for a, b in windows)
    steps = Cover(windows)
    busy = Cover([(d["ts"], d["end"]) for d in t.driver_calls]).of(steps)
    gaps = []
    calls = sorted(t.driver_calls, key=lambda d: d["ts"])
    for prev, nxt in zip(calls, calls[1:]):
        # Only the part of a gap inside steps counts: time between steps is not the trainer's.
        idle = steps.within(prev["end"], nxt["ts"])
        if idle:
            gaps.append({"after": prev["name"], "before": nxt["name"], "step": prev["step"], "idle_s": idle / 1e9})
    gaps.sort(key=lambda g: -g["idle_s"])
    return {"idle_s": (total - busy) / 1e9, "idle_share": (total - busy) / total if total else 0.0,
            "between_calls_s": sum(g["idle_s"] for g in gaps), "largest_gaps": gaps[:5]}


def memory_peaks(t: Trace) -> list:
    peaks, by_rank = {}, {}
    left, right = bisect.bisect_left, bisect.bisect_right
    for s in t.calls + t.transitions:
        role, rank, a = s["role"], s["rank"], s["args"]
        got = by_rank.get((role, rank))
        if got is None:   # once per rank, not per call: a long run has 100k calls per rank
            series = t.mem_series(role, rank)
            got = by_rank[(role, rank)] = ([p[0] for p in series], [p[1] for p in series])
        ts, vs = got
        # The peak: of the samples inside the slice (max() over a slice of the values, at C
        # speed) and of the slice's own readings before and after; the first of equals, as max().
        i, j = left(ts, s["ts"]), right(ts, s["end"])
        mb, ma = a.get("mem_before"), a.get("mem_after")
        if i < j:
            peak = max(vs[i:j])
            if mb is not None and mb > peak:
                peak = mb
            if ma is not None and ma > peak:
                peak = ma
        elif mb is None:
            if ma is None:
                continue
            peak = ma
        else:
            peak = mb if ma is None or mb >= ma else ma
        key = (role, s["name"])
        best = peaks.get(key)
        if best is None or peak > best["peak_bytes"]:
            peaks[key] = {"role": role, "phase": s["name"], "rank": rank, "peak_bytes": peak, "step": s["step"]}
    return sorted(peaks.values(), key=lambda p: (p["role"], -p["peak_bytes"]))


def _ledger_at(t: Trace, role, rank, ts: int) -> dict:
    """The rank's ledger as last reported at or before ts: {category: bytes}."""
    out = {}
    for (ro, rk, cat), series in t.ledger.items():
        if ro == role and rk == rank:
            i = bisect.bisect_right(series, (ts, float("inf")))
            if i:
                out[cat] = series[i - 1][1]
    return out


def leaks(t: Trace) -> list:
    """Leak suspicions by the one rule in rldbg.memory.leaks (also used by `rldbg top`)."""
    cycles = []
    for s in t.transitions:
        frees, _ = moves(s["args"])
        c = observe(s["role"], s["rank"], s["name"], s["step"], s["end"], frees, s["args"].get("mem_after"),
                    _ledger_at(t, s["role"], s["rank"], s["end"]) if frees else {})
        if c is not None:
            cycles.append(c)
    return leak_suspicions(cycles)


def ranks(events: list[dict]) -> list:
    """Who ran where: [{role, rank, node, ip, pid}] from the rank tracks' metadata (export.py);
    a colocated process appears once per role it served. Empty for a trace that predates it."""
    names = _names(events)
    out = []
    for e in events:
        if e.get("ph") != "M":
            continue
        a = e.get("args") or {}
        if e.get("name") == "thread_name" and "node_id" in a and e.get("pid") in names:
            role = names[e["pid"]]
            out.append({"role": role, "rank": 0 if role == "driver" else int(e.get("tid", 1)) - 1,
                        "node": a.get("node_id") or "", "ip": a.get("node_ip") or "", "pid": a.get("pid")})
    return sorted(out, key=lambda r: (r["role"] != "driver", r["role"], r["rank"]))


def clock(events: list[dict]) -> dict | None:
    """The trace's clock alignment (export.py): max uncertainty and per-process offsets, or None."""
    for e in events:
        if e.get("name") == "rldbg trace start":
            c = (e.get("args") or {}).get("clock")
            if isinstance(c, dict):
                return {"aligned": c.get("aligned", True), "max_uncertainty_ns": c.get("max_uncertainty_ns"),
                        "processes": c.get("processes") or {}}
    return None


def read_trace(path: str, jobs: int = 1) -> Trace:
    """The Trace of a trace file, read a piece at a time, by `jobs` processes (see
    rldbg.trace.load_pieces: only a process without threads may pass more than 1); its damage
    notes (rldbg.trace.load.load_trace()'s) in .notes. TraceFileError if the file is not a trace."""
    t, notes = read_by_phase(path, Trace.empty, jobs)
    t.finish()
    t.path, t.notes = path, notes
    return t


def analyse(path: str) -> dict:
    return analyse_trace(path)[0]


def analyse_trace(path: str) -> tuple[dict, Trace]:
    """The analysis and the Trace it read (the HTML report draws its charts from the same one
    instead of reading the file again)."""
    t = read_trace(path)
    return analysis(t), t


def analysis(t: Trace, jobs: int = 1) -> dict:
    """What a read trace says (TraceFileError if it holds no rldbg slices). The analyses only
    read the Trace; with `jobs` > 1 (only from a process without threads: the report's CLI) and
    many slices, the memory peaks (the longest of them) are worked out by a forked helper
    while this process does the rest."""
    t.check()
    apart = jobs > 1 and len(t.calls) + len(t.transitions) >= PEAKS_APART
    with no_gc(), (Forked(lambda: memory_peaks(t)) if apart else contextlib.nullcontext()) as helper:
        out = {"trace": t.path, "ranks": ranks(t.meta), "clock": clock(t.instants), "time": role_shares(t),
               **stragglers(t), "controller": controller_idle(t), "memory_peaks": None,
               "leaks": leaks(t), "nonfinite": sentinel.alarms(t.instants)}
        try:
            out["memory_peaks"] = helper.result() if helper is not None else memory_peaks(t)
        except HelperLost:
            out["memory_peaks"] = memory_peaks(t)
    return out


def _mib(b) -> str:
    return f"{b / 2**20:.1f} MiB"


def render(r: dict) -> str:
    lines = [f"rldbg report: {r['trace']}",
             f"step time {r['time']['step_time_s']:.3f} s over {r['time']['steps']} step(s)"]
    if r.get("ranks"):
        lines += ["", "ranks:"]
        lines += [f"  {x['role']:<16} rank {x['rank']:<3} node {x['node'][:8] or '?':<8}  {x['ip'] or '?':<15} "
                  f"pid {x['pid']}" for x in r["ranks"]]
    c = r.get("clock")
    if c and c.get("max_uncertainty_ns") is not None:
        lines.append(f"  clocks aligned to the collector's within {c['max_uncertainty_ns'] / 1e6:.3f} ms"
                     if c.get("aligned") else "  clocks NOT aligned (exported with each process's own clock)")
    lines += ["", "time per role:"]
    for role, v in r["time"]["roles"].items():
        lines.append(f"  {role:<16} {v['share'] * 100:5.1f}%  ({v['busy_s']:.3f} s busy)")
    c = r["controller"]
    lines += ["", f"controller idle: {c['idle_s']:.3f} s ({c['idle_share'] * 100:.1f}% of step time), "
              f"{c['between_calls_s']:.3f} s between calls"]
    for g in c["largest_gaps"][:3]:
        lines.append(f"  {g['idle_s'] * 1e3:8.1f} ms after {g['after']} before {g['before']} (step {g['step']})")
    lines += ["", "rank skew (mean max/min per call):"]
    lines += [f"  {s['role']}.{s['method']}: {s['mean_max_over_min']}x over {s['calls']} call(s)" for s in r["skew"]]
    for s in r["stragglers"]:
        lines.append(f"  STRAGGLER {s['role']} rank {s['rank']}: {s['method']} {s['slower_than_peers']}x "
                     f"slower than the median of its peers over {s['calls']} call(s)")
    lines += ["", "memory peak per phase:"]
    lines += [f"  {p['role']:<16} {p['phase']:<24} {_mib(p['peak_bytes']):>12}  (rank {p['rank']})"
              for p in r["memory_peaks"]]
    lines += ["", "leak suspicions:" if r["leaks"] else "leak suspicions: none"]
    lines += [f"  {describe(k)}" for k in r["leaks"]]
    lines += [""] + sentinel.render(r.get("nonfinite") or [])
    return "\n".join(lines)
