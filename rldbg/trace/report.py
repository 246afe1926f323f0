"""`rldbg report`: reads a trace (rldbg.trace.report_trace.Trace), runs the analyses over it (one
module each in rldbg.analysis: time, stragglers, memory, transitions, gpus, run) and renders
their results as text; --json prints the same dict, --html draws it (rldbg.trace.html_report).

Works on the exported Chrome JSON (rldbg's own layout: see chrome_text.py), so a trace copied off a
cluster can be analysed anywhere.
"""
from __future__ import annotations

import contextlib

from rldbg import sentinel
from rldbg.analysis import gpus as gpu_analysis, recorded, transitions as transition_analysis
from rldbg.analysis.memory import leaks, memory_peaks
from rldbg.analysis.run import clock, ranks
from rldbg.analysis.stragglers import stragglers
from rldbg.analysis.time import controller_idle, role_shares
from rldbg.memory.leaks import describe
from rldbg.trace.forked import Forked, HelperLost
from rldbg.trace.load import no_gc
from rldbg.trace.report_trace import Trace, read_trace

__all__ = ["Trace", "read_trace", "analyse", "analyse_trace", "analysis", "render"]

# Slices from which the memory peaks are worth a forked helper (about 3 µs a slice here, and a
# fork of a report holding a big trace costs tens of ms).
PEAKS_APART = 50_000


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
        out["recorded"] = recorded.analyse(t)
    return out


def _mib(b) -> str:
    return f"{b / 2**20:.1f} MiB"


def render(r: dict) -> str:
    lines = [f"rldbg report: {r['trace']}"]
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
    lines += ["", f"controller idle: {c['idle_s']:.3f} s ({c['idle_share'] * 100:.1f}% of step time), "
              f"{c['between_calls_s']:.3f} s between calls"]
    for g in c["largest_gaps"][:3]:
        lines.append(f"  {g['idle_s'] * 1e3:8.1f} ms after {g['after']} before {g['before']} (step {g['step']})")
    pids = {x["rank"]: x["pid"] for x in r.get("ranks") or () if x["role"] == "driver"}
    for o in c.get("others") or ():
        lines.append(f"controller pid {pids.get(o['track'], '?')} (track {o['track']}, {o['calls']} call(s)) idle: "
                     f"{o['idle_s']:.3f} s ({o['idle_share'] * 100:.1f}% of step time), "
                     f"{o['between_calls_s']:.3f} s between calls")
        for g in o["largest_gaps"][:3]:
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
    if not first_alarms:
        lines += [""] + sentinel.render(r.get("nonfinite") or [])
    return "\n".join(lines)
