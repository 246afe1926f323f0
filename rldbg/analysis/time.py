"""Where step time goes: each role's share of it, and how long the controller idles between its
worker-group calls (inside steps only: time between steps is not the trainer's)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from collections import defaultdict

from rldbg.analysis.cover import Cover

if TYPE_CHECKING:
    from rldbg.trace.report_trace import Trace


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


def controller_idle(t: Trace) -> dict:
    """How long the controller idles inside steps, and its largest gaps between calls. A job with
    several controllers (the driver or VeRL's TaskRunner, and an evaluation actor beside it) has
    each on a track of its own (rldbg.store.tracks): the first one's figures, and under "others"
    each other one's, by its track (its rank on the driver's process)."""
    windows = _windows(t)
    by_track = defaultdict(list)
    for d in t.driver_calls:
        by_track[d["rank"] if type(d["rank"]) is int else 0].append(d)
    out = _idle(windows, by_track.pop(min(by_track, default=0), []))
    out["others"] = [dict(_idle(windows, calls), track=track, calls=len(calls))
                     for track, calls in sorted(by_track.items())]
    return out


def _idle(windows: list, driver_calls: list) -> dict:
    total = sum(b - a for a, b in windows)
    steps = Cover(windows)
    busy = Cover([(d["ts"], d["end"]) for d in driver_calls]).of(steps)
    calls = sorted(driver_calls, key=lambda d: d["ts"])
    # Only the part of a gap inside steps counts: time between steps is not the trainer's.
    idle = [steps.within(prev["end"], nxt["ts"]) / 1e9 for prev, nxt in zip(calls, calls[1:])]
    gaps = sorted((k for k, s in enumerate(idle) if s), key=lambda k: -idle[k])   # the gap after call k
    return {"idle_s": (total - busy) / 1e9, "idle_share": (total - busy) / total if total else 0.0,
            "between_calls_s": sum(idle[k] for k in gaps), "largest_gaps": [
                {"after": calls[k]["name"], "before": calls[k + 1]["name"], "step": calls[k]["step"], "idle_s": idle[k]}
                for k in gaps[:5]]}
