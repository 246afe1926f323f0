"""Memory over the run: the peak of each phase (calls and transitions) per role, and leak
suspicions by the one leak rule (rldbg.memory.leaks, which `rldbg top` applies live too)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import bisect
from operator import itemgetter

from rldbg.memory.leaks import leak_suspicions, observe
from rldbg.trace.events import moves

if TYPE_CHECKING:
    from rldbg.trace.report_trace import Trace

_TIME = itemgetter(0)   # of a (ts, value) sample


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
            i = bisect.bisect_right(series, ts, key=_TIME)
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
