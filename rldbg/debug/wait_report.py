"""The driver's view of a pause: when a worker-group call has waited a while, look up paused
workers on the dashboard and say which role/rank is at a breakpoint and how to attach, so
a pause reads as a pause, not a hang."""
from __future__ import annotations

import os
import sys
import time

REPORT_AFTER_S = float(os.environ.get("RLDBG_WAIT_REPORT_S", "5"))
_last_check = 0.0
_reported: set = set()


def dashboard_address() -> str | None:
    addr = os.environ.get("RAY_DASHBOARD_ADDRESS")
    if addr:
        return addr
    try:
        import ray

        url = ray._private.worker.global_worker.node.webui_url  # set when this driver started Ray
        return f"http://{url}" if url and not url.startswith("http") else url
    except Exception:
        return None


def report(group: str, method: str, flow_id: int, waited_s: float) -> list[str]:
    """Print (once per call and worker) the paused workers of `group`; returns the lines."""
    global _last_check
    now = time.monotonic()
    if waited_s < REPORT_AFTER_S or now - _last_check < REPORT_AFTER_S:
        return []
    _last_check = now
    address = dashboard_address()
    if address is None:
        return []
    try:
        from rldbg.dashboard import Dashboard
        from rldbg.debug.workers import list_paused

        paused = list_paused(Dashboard(address, timeout=3))
    except Exception:
        return []  # the dashboard is optional; never disturb the run
    lines = []
    for w in paused:
        roles = (w.role or "").split("+")
        if group not in roles or (flow_id, w.pid) in _reported:
            continue
        _reported.add((flow_id, w.pid))
        lines.append(f"rldbg: {group}.{method} is waiting on {group} rank {w.rank}, paused at a breakpoint "
                     f"(debugpy {w.host}:{w.port}); attach with `rldbg attach {group}:{w.rank}` or VS Code's "
                     f"Ray Distributed Debugger")
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return lines
