"""Put torch.profiler operators into rldbg's Perfetto trace, nested inside the call spans.

Perfetto ignores torch's baseTimeNanoseconds and drops an X slice that overlaps a sibling without
nesting. So the operators are shifted onto unix ns; the main thread's slices (those of the thread
that ran the rldbg:<method> annotation) go onto the call's own track, kept only inside the
annotation window and forced to nest; other threads and GPU streams go to child tracks
"rank N torch <thread>" (tid*1000+k) where nesting inside the call is moot. Flow arrows,
profiler-internal events and metadata are dropped; [memory] instants become counters
"rank N torch <device> allocated".
"""
from __future__ import annotations

import glob
import gzip
import json
import os

from rldbg.profilers.torch_prof import META_KEY

_SLACK_NS = 1000   # rounding noise allowed when forcing a child inside its parent


def _us(ns: int) -> str:
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    q, r = divmod(ns, 1000)
    return f"{sign}{q}.{r:03d}"


def read_trace(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def trace_meta(trace: dict) -> dict | None:
    """The rldbg entry written by profile_call (a JSON string inside the torch trace)."""
    raw = trace.get(META_KEY)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return raw if isinstance(raw, dict) and "t0_ns" in raw else None


def _abs_ns(base: int, ts_us) -> int:
    return base + round(float(ts_us) * 1000)


def _nest(slices: list) -> tuple[list, int]:
    """Keep slices that nest on one track: sort by (start, longest first), clip overhangs within
    rounding noise, drop real partial overlaps. slices: [start, end, event]."""
    slices.sort(key=lambda s: (s[0], -(s[1] - s[0])))
    stack, kept, dropped = [], [], 0
    for s in slices:
        while stack and stack[-1] <= s[0]:
            stack.pop()
        if stack and s[1] > stack[-1]:
            if s[1] - stack[-1] > _SLACK_NS:
                dropped += 1
                continue
            s[1] = stack[-1]
        stack.append(s[1])
        kept.append(s)
    return kept, dropped


def torch_trace_events(trace: dict, pid: int, tid: int, origin_ns: int) -> list[dict]:
    """Chrome JSON events for one torch trace, on rldbg's clock, main-thread ops on (pid, tid)."""
    meta = trace_meta(trace) or {}
    rank = meta.get("rank", 0)
    events = trace.get("traceEvents") or []
    base = int(trace.get("baseTimeNanoseconds") or 0)
    ann_name = meta.get("annotation")
    ann = next((e for e in events if e.get("ph") == "X" and e.get("name") == ann_name), None)
    t0, t1 = meta.get("t0_ns"), meta.get("t1_ns")
    shift, main_tid, lo, hi = 0, None, None, None
    if ann is not None:
        main_tid = ann.get("tid")
        a0 = _abs_ns(base, ann["ts"])
        a1 = a0 + round(float(ann.get("dur", 0)) * 1000)
        # Trust torch's clock when it puts the annotation inside our own window; otherwise pin
        # the annotation's start to t0 (the clocks disagree by more than the window's slack).
        if t0 is not None and t1 is not None and not (t0 <= a0 and a1 <= t1):
            shift = t0 - a0
        lo, hi = a0 + shift, a1 + shift
    main, aux, out = [], {}, []
    for e in events:
        ph = e.get("ph")
        if ph == "i" and e.get("name") == "[memory]":
            a = e.get("args") or {}
            dev = "cpu" if a.get("Device Type", 0) == 0 else f"cuda{a.get('Device Id', 0)}"
            if "Total Allocated" in a:
                out.append({"ph": "C", "pid": pid, "name": f"rank {rank} torch {dev} allocated",
                            "ts": _us(_abs_ns(base, e["ts"]) + shift - origin_ns),
                            "args": {"bytes": a["Total Allocated"]}})
            continue
        if ph != "X" or not isinstance(e.get("tid"), int) or e.get("cat") in (None, "Trace"):
            continue
        start = _abs_ns(base, e["ts"]) + shift
        end = start + round(float(e.get("dur", 0)) * 1000)
        ev = {"ph": "X", "pid": pid, "cat": f"torch.{e['cat']}", "name": e.get("name", "?"),
              "args": dict(e.get("args") or {}, role=meta.get("role"), rank=rank, step=meta.get("step"))}
        if e is ann:
            ev["name"] = "torch.profiler"
        if ann is not None and e.get("tid") == main_tid and e.get("pid") == ann.get("pid"):
            if lo is not None and lo <= start and end <= hi:
                main.append([start, end, ev])
        else:
            aux.setdefault((e.get("pid"), e["tid"]), []).append([start, end, ev])
    kept, dropped = _nest(main)
    out += [dict(ev, tid=tid, ts=_us(s - origin_ns), dur=_us(e_ - s)) for s, e_, ev in kept]
    for k, (key, slices) in enumerate(sorted(aux.items(), key=lambda kv: str(kv[0])), 1):
        aux_tid = tid * 1000 + k
        label = f"stream {key[1]}" if isinstance(key[0], int) and key[0] < 1000 else f"thread {key[1]}"
        out.append({"ph": "M", "pid": pid, "tid": aux_tid, "name": "thread_name",
                    "args": {"name": f"rank {rank} torch {label}"}})
        nested, d = _nest(slices)
        dropped += d
        out += [dict(ev, tid=aux_tid, ts=_us(s - origin_ns), dur=_us(e_ - s)) for s, e_, ev in nested]
    if dropped:
        out.append({"ph": "i", "s": "t", "pid": pid, "tid": tid, "name": "torch slices dropped",
                    "ts": _us((lo or t0 or origin_ns) - origin_ns), "args": {"dropped": dropped}})
    return out


def find_traces(profile_dir: str) -> list[str]:
    pats = ("*.pt.trace.json", "*.pt.trace.json.gz")
    return sorted(p for pat in pats for p in glob.glob(os.path.join(profile_dir, "**", pat), recursive=True))


def merge_torch_traces(profile_dir: str, put, track, origin_ns: int, within=None) -> dict:
    """Merge every torch trace profile_call wrote under profile_dir (others are skipped): each
    event goes to put(event), the exporter's writer, with ts/dur as "µs.nnn" strings relative to
    origin_ns. track(role, rank) gives the (pid, tid) of the rank's call slices, or (pid, tid,
    clock_offset_ns) to shift its operators onto the trace's one clock, or None to skip the trace;
    within=(lo_ns, hi_ns) skips traces whose call window lies outside it (old runs)."""
    stats = {"traces": 0, "events": 0, "skipped": 0}
    lo, hi = within if within else (None, None)
    for path in find_traces(profile_dir):
        try:
            trace = read_trace(path)
        except (OSError, ValueError, EOFError):
            stats["skipped"] += 1
            continue
        meta = trace_meta(trace)
        where = track(meta.get("role"), int(meta.get("rank", 0))) if meta else None
        if where is None or (lo is not None and meta["t0_ns"] < lo) or (hi is not None and meta["t1_ns"] > hi):
            stats["skipped"] += 1
            continue
        # track may add the rank's clock offset (rldbg.trace.clock): its operators then move with its calls
        pid, tid, *offset = where
        for ev in torch_trace_events(trace, pid, tid, origin_ns - (offset[0] if offset else 0)):
            put(ev)
            stats["events"] += 1
        stats["traces"] += 1
    return stats
