"""`rldbg report`: reads a trace's store (rldbg.store: a run's own, or a trace from elsewhere imported into one) into
the analyses' input (rldbg.trace.report_trace.Trace), runs the analyses over it (one module each in rldbg.analysis:
time, stragglers, memory, transitions, gpus, recorded) and renders their results as text; --json prints the same dict,
--html draws it (rldbg.trace.html_report).
"""
from __future__ import annotations

import os

from rldbg import sentinel
from rldbg.analysis import gpus as gpu_analysis, recorded, transitions as transition_analysis
from rldbg.analysis.memory import leaks, memory_peaks
from rldbg.analysis.stragglers import stragglers
from rldbg.analysis.time import controller_idle, role_shares
from rldbg.memory.leaks import describe
from rldbg.store import no_gc
from rldbg.trace.report_trace import Trace, finite_number

__all__ = ["Trace", "read_trace", "analyse", "analyse_trace", "analysis", "render"]


def read_trace(path: str) -> Trace:
    """The Trace of the store `path` means (rldbg.store.find: a store, a run's Perfetto file with
    its store beside it, or a Chrome JSON trace, imported); its damage notes in .notes.
    TraceFileError (one line) for what is none of these."""
    from rldbg.store import find, queries
    conn = find.open_for(path)
    try:
        t = queries.read(conn, path)
        store = conn.execute("PRAGMA database_list").fetchone()[2]   # "": imported, in memory
        t.store = store if store and not os.path.samefile(store, path) else ""
        return t
    finally:
        conn.close()


def analyse(path: str) -> dict:
    return analyse_trace(path)[0]


def analyse_trace(path: str) -> tuple[dict, Trace]:
    """The analysis and the Trace it read (the HTML report draws its charts from the same one
    instead of reading the file again)."""
    t = read_trace(path)
    return analysis(t), t


def analysis(t: Trace) -> dict:
    """What a read trace says (TraceFileError if it holds no rldbg slices)."""
    t.check()
    with no_gc():
        return {"trace": t.path, "store": t.store or None, "ranks": t.ranks, "clock": clock(t.start),
                "time": role_shares(t), **stragglers(t), "controller": controller_idle(t),
                "memory_peaks": memory_peaks(t), "leaks": leaks(t), "nonfinite": sentinel.alarms(t.instants),
                **transition_analysis.analyse(t), "gpus": gpu_analysis.analyse(t, t.ranks),
                "recorded": recorded.analyse(t)}


def clock(start: dict) -> dict | None:
    """How well the processes' clocks were aligned to the collector's (the trace start record's
    args): max uncertainty and per-process offsets, or None."""
    c = start.get("clock") if isinstance(start, dict) else None
    if not isinstance(c, dict):
        return None
    # An uncertainty that is not a finite number (an edited trace) is no figure to print.
    u = c.get("max_uncertainty_ns")
    return {"aligned": c.get("aligned", True) is not False, "max_uncertainty_ns": u if finite_number(u) else None,
            "processes": c.get("processes") if isinstance(c.get("processes"), dict) else {}}


def mib_text(b) -> str:
    return f"{b / 2**20:.1f} MiB"


def _idle_text(c: dict) -> str:
    """Idle inside steps, and how much of it between calls (the rest: before a first call, after a last)."""
    idle, between = f"{c['idle_s']:.3f}", f"{c['between_calls_s']:.3f}"
    return (f"{idle} s ({c['idle_share'] * 100:.1f}% of step time), "
            + ("all of it between calls" if between == idle else f"{between} s of it between calls"))


def render(r: dict) -> str:
    # A Perfetto file is read through the store beside it, whatever was done to the file since.
    lines = [f"rldbg report: {r['trace']}" + (f" (read from its store, {os.path.basename(r['store'])})"
                                              if r.get("store") else "")]
    # What the trace holds and, for a flight recorder's dump, what triggered it: said first, with
    # a non-finite output the trigger names.
    rec = r.get("recorded")
    first_alarms = bool(rec and rec.get("trigger") and r.get("nonfinite"))
    if rec:
        lines += recorded.render(rec)
    if first_alarms:
        lines += sentinel.render(r["nonfinite"])
    lines.append(f"step time {r['time']['step_time_s']:.3f} s over {r['time']['steps']} step(s)")
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
    lines += ["", f"controller idle: {_idle_text(c)}"]
    for g in c["largest_gaps"][:3]:
        lines.append(f"  {g['idle_s'] * 1e3:8.1f} ms after {g['after']} before {g['before']} (step {g['step']})")
    pids = {x["rank"]: x["pid"] for x in r.get("ranks") or () if x["role"] == "driver"}
    for o in c.get("others") or ():
        lines.append(f"controller pid {pids.get(o['track'], '?')} (track {o['track']}, {o['calls']} call(s)) idle: "
                     + _idle_text(o))
        for g in o["largest_gaps"][:3]:
            lines.append(f"  {g['idle_s'] * 1e3:8.1f} ms after {g['after']} before {g['before']} (step {g['step']})")
    lines += ["", "rank skew (mean max/min per call):"]
    lines += [f"  {s['role']}.{s['method']}: {s['mean_max_over_min']}x over {s['calls']} call(s)" for s in r["skew"]]
    if not r["stragglers"]:
        lines.append("  stragglers: none (no rank is consistently slower than its peers)")
    for s in r["stragglers"]:
        lines.append(f"  STRAGGLER {s['role']} rank {s['rank']}: {s['method']} {s['slower_than_peers']}x "
                     f"slower than the median of its peers over {s['calls']} call(s)")
    if stops := r.get("breakpoint_stops"):   # the step times above still hold the pauses
        lines.append(f"  not in the skew: {r['calls_paused']} call(s) paused at {len(stops)} breakpoint stop(s), which "
                     "the step times include: " + "; ".join(f"{b['role']} rank {b['rank']} step {b['step']} at "
                     f"{os.path.basename(str(b['file']))}:{b['line']}" for b in stops[:5]) + ("; ..." * (len(stops) > 5)))
    lines += ["", "memory peak per phase:"]
    lines += [f"  {p['role']:<16} {p['phase']:<24} {mib_text(p['peak_bytes']):>12}  (rank {p['rank']})"
              for p in r["memory_peaks"]]
    if r.get("transitions") is not None:
        lines += [""] + transition_analysis.render(r["transitions"], r.get("not_returned") or [])
    if r.get("gpus"):
        lines += [""] + gpu_analysis.render(r["gpus"])
    lines += ["", "leak suspicions:" if r["leaks"] else "leak suspicions: none"]
    lines += [f"  {describe(k)}" for k in r["leaks"]]
    if not first_alarms:
        lines += [""] + sentinel.render(r.get("nonfinite") or [])
    return "\n".join(lines)
