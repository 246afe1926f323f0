"""The driver's view of a pause: when a worker-group call has waited a while, look up paused workers on the dashboard
and say which role/rank is at a breakpoint and how to attach, so a pause reads as a pause, not a hang."""
from __future__ import annotations

import contextlib
import os
import sys
import time

from rldbg.debug.specs import role_matches
from rldbg.switches import HANG_REPORT_S, WAIT_REPORT_S


def _seconds(name: str, default: float) -> float:
    """A switch's seconds; a bad value is said once and the default kept: read in the user's loop."""
    text = os.environ.get(name) or str(default)
    with contextlib.suppress(ValueError):
        if 0 < (value := float(text)) < float("inf"):
            return value
    print(f"rldbg: ignoring {name}={text!r}: expected seconds > 0; using {default}", file=sys.stderr)
    return default


REPORT_AFTER_S = _seconds(WAIT_REPORT_S, 5.0)
# After this long a call that is not paused at a breakpoint looks hung: read the group's stacks
# once and say which ranks sit in a collective and which one is elsewhere.
HANG_AFTER_S = _seconds(HANG_REPORT_S, 60.0)
_last_check = 0.0
_reported: set = set()
_explained: set = set()


def report(group: str, method: str, flow_id: int, waited_s: float) -> list[str]:
    """Print (once per call and worker) the paused workers of `group`; returns the lines."""
    global _last_check
    now = time.monotonic()
    if waited_s < REPORT_AFTER_S or now - _last_check < REPORT_AFTER_S:
        return []
    _last_check = now
    from rldbg.control.discovery import own_dashboard
    from rldbg.dashboard import Dashboard
    from rldbg.debug.paused_workers import list_paused

    if (address := os.environ.get("RAY_DASHBOARD_ADDRESS") or own_dashboard()) is None:
        return []
    try:
        paused = list_paused(Dashboard(address, timeout=3))
    except Exception:  # noqa: BLE001 - the dashboard is optional; never disturb the run
        return []
    lines = []
    for w in paused:
        if not role_matches(group, w.role or "") or (flow_id, w.pid) in _reported:
            continue
        _reported.add((flow_id, w.pid))
        lines.append(f"rldbg: {group}.{method} is waiting on {group} rank {w.rank}, paused at a breakpoint "
                     f"(debugpy {w.host}:{w.port}); attach with `rldbg attach {group}:{w.rank}` or VS Code's "
                     f"Ray Distributed Debugger")
    if waited_s >= HANG_AFTER_S and flow_id not in _explained and not lines:
        # 'critic.update_critic has waited 60 s: critic: rank 1 waits in all_reduce ...'
        _explained.add(flow_id)
        from rldbg.profilers import stacks, targets
        try:
            dash = Dashboard(address, timeout=5)
            found = targets.find(dash, role=group)
            explained = stacks.explain(stacks.fetch(found, dash)) if found else []
        except Exception:  # noqa: BLE001 - best effort: never disturb the run
            explained = []
        lines += [f"rldbg: {group}.{method} has waited {waited_s:.0f} s: {e} "
                  f"(`rldbg stack --role {group}` for the stacks)" for e in explained]
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return lines
