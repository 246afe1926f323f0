"""What a trace says about a run: where step time goes, who straggles, how long the controller
idles between calls, memory peaks per phase, and leak suspicions (the one rule in rldbg.memory.leaks).

Works on the exported Chrome JSON (rldbg's own layout: see chrome_text.py), so a trace copied off a
cluster can be analysed anywhere; what it reads of one is a Trace (rldbg.trace.report_trace).
"""
from __future__ import annotations

import bisect
import contextlib
import statistics
from collections import defaultdict

from rldbg import sentinel
from rldbg.analysis import gpus as gpu_analysis, transitions as transition_analysis
from rldbg.memory.leaks import describe, leak_suspicions, observe
from rldbg.trace.events import moves
from rldbg.trace.forked import Forked, HelperLost
from rldbg.trace.load import no_gc
from rldbg.trace.report_trace import Trace, finite_number, process_names, read_trace, role_of_pid

__all__ = ["Cover", "Trace", "read_trace", "analyse", "analyse_trace", "analysis", "render"]

# Slices from which the memory peaks are worth a forked helper (about 3 µs a slice here, and a
# fork of a report holding a big trace costs tens of ms).
PEAKS_APART = 50_000
STRAGGLER_RATIO = 1.5
# A straggler is named only with evidence: at least this many calls (a one-off init_model that
# took 1.8x its peer is noise), and a median excess over its peers a person would care about.
STRAGGLER_MIN_CALLS = 3
STRAGGLER_MIN_EXCESS_NS = 5_000_000


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


def by_call(item) -> tuple:
    """Sort key of a ((role, method, ...), value) item: a call's method may be None (a trace
    that does not name it), which does not compare with a name."""
    (role, method, *rest), _ = item
    return (role, method is not None, method or "", *rest)


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
        if len(durs) == 2:   # each rank's peer is the other (the median of one), half of all calls here
            (r1, d1), (r2, d2) = durs.items()
            against = ((r1, d1, d2), (r2, d2, d1))
        else:
            against = [(rank, d, statistics.median([v for r, v in durs.items() if r != rank]))
                       for rank, d in durs.items()]
        for rank, d, peers in against:
            ratios[(role, method, rank)].append(d / max(peers, 1))
            excess[(role, method, rank)].append(d - peers)
    found = []
    for key, rs in sorted(ratios.items(), key=by_call):
        role, method, rank = key
        med = statistics.median(rs)
        if (med > ratio and len(rs) >= STRAGGLER_MIN_CALLS
                and statistics.median(excess[key]) >= STRAGGLER_MIN_EXCESS_NS):
            found.append({"role": role, "rank": rank, "method": method, "calls": len(rs),
                          "slower_than_peers": round(med, 2)})
    return {"stragglers": found,
            "skew": [{"role": r, "method": m, "calls": len(v), "mean_max_over_min": round(statistics.mean(v), 2)}
                     for (r, m), v in sorted(skew.items(), key=by_call)]}


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
    names = process_names(events)
    out = []
    for e in events:
        if e.get("ph") != "M":
            continue
        a = e.get("args") or {}
        if e.get("name") != "thread_name" or "node_id" not in a:
            continue
        role, tid = role_of_pid(names, e.get("pid")), e.get("tid", 1)
        if role is not None and (role == "driver" or type(tid) is int):   # a rank's track: tid = rank + 1
            out.append({"role": role, "rank": 0 if role == "driver" else tid - 1,
                        "node": str(a.get("node_id") or ""), "ip": str(a.get("node_ip") or ""),
                        "pid": a.get("pid")})
    return sorted(out, key=lambda r: (r["role"] != "driver", r["role"], r["rank"]))


def clock(events: list[dict]) -> dict | None:
    """The trace's clock alignment (export.py): max uncertainty and per-process offsets, or None."""
    for e in events:
        if e.get("name") == "rldbg trace start":
            c = (e.get("args") or {}).get("clock")
            if isinstance(c, dict):
                # An uncertainty that is not a finite number (an edited trace) is no figure to print.
                u = c.get("max_uncertainty_ns")
                return {"aligned": c.get("aligned", True) is not False,
                        "max_uncertainty_ns": u if finite_number(u) else None,
                        "processes": c.get("processes") if isinstance(c.get("processes"), dict) else {}}
    return None


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
    many slices, the memory peaks and leak suspicions (the two that read the memory series,
    about as long as the rest together) are worked out by a forked helper while this process
    does the rest."""
    t.check()
    apart = jobs > 1 and len(t.calls) + len(t.transitions) >= PEAKS_APART

    def memory() -> tuple:
        return memory_peaks(t), leaks(t), transition_analysis.analyse(t)
    with no_gc(), (Forked(memory) if apart else contextlib.nullcontext()) as helper:
        out = {"trace": t.path, "ranks": ranks(t.meta), "clock": clock(t.instants), "time": role_shares(t),
               **stragglers(t), "controller": controller_idle(t), "memory_peaks": None,
               "leaks": None, "nonfinite": sentinel.alarms(t.instants)}
        try:
            out["memory_peaks"], out["leaks"], moved = helper.result() if helper is not None else memory()
        except HelperLost:
            out["memory_peaks"], out["leaks"], moved = memory()
        out.update(moved)
        out["gpus"] = gpu_analysis.analyse(t, out["ranks"])
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
    if r.get("transitions") is not None:
        lines += [""] + transition_analysis.render(r["transitions"], r.get("not_returned") or [])
    if r.get("gpus"):
        lines += [""] + gpu_analysis.render(r["gpus"])
    lines += ["", "leak suspicions:" if r["leaks"] else "leak suspicions: none"]
    lines += [f"  {describe(k)}" for k in r["leaks"]]
    lines += [""] + sentinel.render(r.get("nonfinite") or [])
    return "\n".join(lines)
