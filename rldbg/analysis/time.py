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
