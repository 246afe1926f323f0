"""What a trace holds and why it was written: the steps it covers, how it was recorded (every step,
chosen steps: trace.steps, or a flight recorder's window: trace.window) and, for a flight
recorder's dump, its trigger and, for a hang, every process's stacks. The report says this first.
"""
from __future__ import annotations

from itertools import chain
from operator import itemgetter

from rldbg.trace.events import TRIGGER
from rldbg.trace.window import STACK, ranges, steps_text

SHOWN_FRAMES = 4


def analyse(t) -> dict:
    # Each distinct step once (at C speed) before the type check: 10^5 slices, 10^3 steps.
    steps = [n for n in set(map(itemgetter("step"), chain(t.calls, t.transitions, t.driver_calls, t.steps)))
             if type(n) is int]
    start = t.start
    how = start.get("recorded") if isinstance(start.get("recorded"), dict) else {}
    out = {"steps": ranges(steps), "asked_steps": how.get("steps") or [], "window": how.get("window") or 0,
           "trigger": None, "stacks": []}
    if (trig := next((e for e in t.instants if e["name"] == TRIGGER), None)) is not None:
        out["trigger"] = dict(trig["args"], role=trig["role"], rank=trig["rank"])
    for e in t.instants:
        if e["name"] == STACK:
            a = e["args"]
            out["stacks"].append({"role": e["role"], "rank": e["rank"], "thread": a.get("thread"),
                                  "stack": a.get("stack") or ""})
    return out


def render(r: dict) -> list[str]:
    lines = []
    if trig := r.get("trigger"):
        what = ", ".join(f"{k} {v}" for k, v in trig.items()
                         if k not in ("reason", "step", "role", "rank") and v not in (None, "", []))
        when = "before the first step" if trig.get("step") is None else f"at step {trig['step']}"
        lines.append(f"flight recorder dump: {trig.get('reason')} {when}"
                     + (f" ({trig['role']} rank {trig['rank']})" if trig.get("role") != "driver" else "")
                     + (f": {what}" if what else ""))
    covered = steps_text(r["steps"]) or "none"
    if r.get("window"):
        lines.append(f"covers steps {covered}: the flight recorder's last {r['window']} steps (trace.window)")
    elif r.get("asked_steps"):
        lines.append(f"covers steps {covered}: recorded only steps {steps_text(r['asked_steps'])} (trace.steps)")
    else:
        lines.append(f"covers steps {covered}")
    if r.get("stacks"):
        lines.append("where each process was when the dump was taken (its main thread, innermost frames last):")
        for s in sorted(r["stacks"], key=lambda s: (s["role"] != "driver", s["role"], s["rank"])):
            if s["thread"] != "main":
                continue
            lines.append(f"  {s['role']} rank {s['rank']}:" if s["role"] != "driver" else "  driver:")
            frames = [f.strip() for f in s["stack"].splitlines() if f.strip().startswith("File ")]
            lines += [f"    {f}" for f in frames[-SHOWN_FRAMES:]]   # the innermost, "file:line in function"
    return lines
