"""Who ran where (each rank's node, IP and pid, from the trace's metadata) and how well the
processes' clocks were aligned to the collector's."""
from __future__ import annotations

from rldbg.trace.report_trace import finite_number, process_names, role_of_pid


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
            # the driver's process: one track per controller (tid = its track + 1; export.py)
            out.append({"role": role, "rank": tid - 1 if type(tid) is int else 0,
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
