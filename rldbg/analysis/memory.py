"""Memory over the run: the peak of each phase (calls and transitions) per role, and leak
suspicions by the one leak rule (rldbg.memory.leaks, which `rldbg top` applies live too)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import bisect
from collections import defaultdict

from rldbg.memory.leaks import leak_suspicions, observe
from rldbg.trace.events import moves

if TYPE_CHECKING:
    from rldbg.trace.report_trace import Trace


def memory_peaks(t: Trace) -> list:
    peaks, by_rank = {}, {}
    left, right = bisect.bisect_left, bisect.bisect_right
    for s in t.calls + t.transitions:
        role, rank, a = s["role"], s["rank"], s["args"]
        got = by_rank.get((role, rank))
        if got is None:   # once per rank, not per call: a long run has 100k calls per rank
            got = by_rank[(role, rank)] = t.mem_series(role, rank)
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
        if (best := peaks.get(key)) is None or peak > best["peak_bytes"]:
            peaks[key] = {"role": role, "phase": s["name"], "rank": rank, "peak_bytes": peak, "step": s["step"]}
    return sorted(peaks.values(), key=lambda p: (p["role"], -p["peak_bytes"]))


def leaks(t: Trace) -> list:
    """Leak suspicions by the one rule in rldbg.memory.leaks (also used by `rldbg top`)."""
    ledgers = defaultdict(dict)   # (role, rank) -> {category: (times, bytes)}
    for (role, rank, cat), series in t.ledger.items():
        ledgers[(role, rank)][cat] = series
    cycles = []
    for s in t.transitions:
        frees, _ = moves(s["args"])
        if not frees:
            continue
        end, at = s["end"], {}   # the rank's ledger as last reported by the transition's end
        for cat, (times, values) in ledgers.get((s["role"], s["rank"]), {}).items():
            if i := bisect.bisect_right(times, end):
                at[cat] = values[i - 1]
        c = observe(s["role"], s["rank"], s["name"], s["step"], end, frees, s["args"].get("mem_after"), at)
        if c is not None:
            cycles.append(c)
    return leak_suspicions(cycles)
