"""Who straggles: per call, each rank's time against the median of its peers'; a rank is named
only with evidence (enough calls, and an excess a person would care about). Also each method's
skew (max over min per call). A call that stopped at a breakpoint lasted as long as someone looked:
it is left out of the skew (a mean), and the stops listed; the straggler rule's medians outvote it."""
from __future__ import annotations

from typing import TYPE_CHECKING

import statistics
from collections import defaultdict

from rldbg.trace.events import BREAKPOINT

if TYPE_CHECKING:
    from rldbg.trace.report_trace import Trace

STRAGGLER_RATIO = 1.5
# A straggler is named only with evidence: at least this many calls (a one-off init_model that
# took 1.8x its peer is noise), and a median excess over its peers a person would care about.
STRAGGLER_MIN_CALLS = 3
STRAGGLER_MIN_EXCESS_NS = 5_000_000


def by_call(item) -> tuple:
    """Sort key of a ((role, method, ...), value) item: a call's method may be None (a trace
    that does not name it), which does not compare with a name."""
    (role, method, *rest), _ = item
    return (role, method is not None, method or "", *rest)


def stragglers(t: Trace, ratio: float = STRAGGLER_RATIO) -> dict:
    stops, per_call, paused = [e for e in t.instants if e["name"] == BREAKPOINT], defaultdict(dict), set()
    for c in t.calls:
        if c["flow"] is not None:
            per_call[key := (c["role"], c["method"], c["flow"])][c["rank"]] = c["dur"]
            if any(c["ts"] <= e["ts"] <= c["end"] and (e["role"], e["rank"]) == (c["role"], c["rank"]) for e in stops):
                paused.add(key)
    ratios = defaultdict(list)            # (role, method, rank) -> [dur / median of peers]
    excess = defaultdict(list)            # (role, method, rank) -> [dur - median of peers], ns
    skew = defaultdict(list)              # (role, method) -> [max / min]
    for (role, method, flow), durs in per_call.items():
        if len(durs) < 2:
            continue
        if (role, method, flow) not in paused:
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
    return {"stragglers": found, "calls_paused": len(paused), "breakpoint_stops": [
                {k: e["args"].get(k) for k in ("role", "rank", "step", "method", "file", "line", "reason")} for e in stops],
            "skew": [{"role": r, "method": m, "calls": len(v), "mean_max_over_min": round(statistics.mean(v), 2)}
                     for (r, m), v in sorted(skew.items(), key=by_call)]}
