"""GPU memory by process: every process NVML saw on a GPU the job used, by pid, named by the
job's rank where the pid is one of its ranks and "not a rank of this job" otherwise (a rollout
server or scheduler the job started in a process of its own, or a stranger on the GPU).

Read off the "<gpu> memory" counters the memory sampler records on every rank that computes on
a GPU (rldbg.memory.sampler): the GPU's used and total bytes and a "pid N" series per process.
"""
from __future__ import annotations

MiB = 1 << 20


def _peak_last(series: tuple) -> tuple:
    values = series[1]
    return (max(values), values[-1]) if values else (None, None)


def analyse(t, ranks: list[dict]) -> list[dict]:
    """[{node, gpu, total_bytes, peak_used_bytes, processes: [{pid, who, peak_bytes, last_bytes}]}],
    `ranks` being the report's "ranks" (role, rank, pid of each rank's process)."""
    who_by_pid: dict = {}
    for r in ranks:
        if r.get("pid") is not None:
            who_by_pid.setdefault(r["pid"], []).append(f"{r['role']} rank {r['rank']}"
                                                      if r["role"] != "driver" else "driver")
    out = []
    for (node, gpu), series in sorted(t.gpus.items()):
        procs = []
        for name, samples in series.items():
            if not name.startswith("pid "):
                continue
            try:
                pid = int(name[4:])
            except ValueError:
                continue
            peak, last = _peak_last(samples)
            who = who_by_pid.get(pid)
            procs.append({"pid": pid, "who": ", ".join(dict.fromkeys(who)) if who else None,
                          "in_job": who is not None, "peak_bytes": peak, "last_bytes": last})
        procs.sort(key=lambda p: (not p["in_job"], -(p["peak_bytes"] or 0)))
        out.append({"node": node, "gpu": gpu, "total_bytes": _peak_last(series.get("total") or ((), ()))[0],
                    "peak_used_bytes": _peak_last(series.get("used") or ((), ()))[0], "processes": procs})
    return out


def render(gpus: list[dict]) -> list[str]:
    if not gpus:
        return []
    lines = ["GPU memory by process (NVML):"]
    for g in gpus:
        where = f" on node {g['node'][:8]}" if g["node"] else ""
        total = f"{g['total_bytes'] / MiB:.0f} MiB" if g["total_bytes"] else "?"
        peak = f"{g['peak_used_bytes'] / MiB:.1f} MiB" if g["peak_used_bytes"] is not None else "?"
        lines.append(f"  {g['gpu']}{where}: peak used {peak} of {total}")
        for p in g["processes"]:
            who = p["who"] or "not a rank of this job"
            lines.append(f"    pid {p['pid']:<8} {who:<28} peak {p['peak_bytes'] / MiB:9.1f} MiB, "
                         f"last {p['last_bytes'] / MiB:9.1f} MiB")
    return lines
