"""A controller that is not the Ray driver (VeRL's TaskRunner actor, an evaluation actor, a task)
joins its job's hub and honours the step gate like the driver; its call ids are its own, so the
hub and the trace's flows never confuse its calls with another controller's.

instrument.call_begin calls due() (a global read and a clock read) while no gate is installed;
join() looks the hub up at most every RECHECK_S, outside the driver (whose gate comes with start()).
"""
from __future__ import annotations

import itertools
import os
import time

RECHECK_S = 5.0
# A controller's call ids start at pid * FLOW_SPAN: unique in the job, exact in a trace's JSON.
FLOW_SPAN = 10 ** 7

_next = [0.0]
_role: list = []   # [True] in the driver, [False] elsewhere, once known


def due() -> bool:
    return time.monotonic() >= _next[0]


def is_driver() -> bool | None:
    """True in the Ray driver, False in a Ray worker (actor or task), None without Ray."""
    if _role:
        return _role[0]
    try:
        import ray
        from ray._private.worker import SCRIPT_MODE, global_worker

        if not ray.is_initialized():
            return None
        _role.append(global_worker.mode == SCRIPT_MODE)
        return _role[0]
    except Exception:
        return None


def join() -> "itertools.count | None":
    """In a controller that is not the driver: install a gate on the job's hub if it has one. Returns, the first time it
    finds it runs outside the driver, the call ids this controller numbers its calls with from now on (else None)."""
    _next[0] = time.monotonic() + RECHECK_S
    first = not _role
    driver = is_driver()
    if driver is None or driver:
        if driver:
            _next[0] = float("inf")   # the driver's gate comes with rldbg.control.start()
        return None
    ids = itertools.count(os.getpid() * FLOW_SPAN + 1) if first else None
    _install_gate()
    return ids


def _install_gate() -> None:
    import ray

    from rldbg.control import gate
    from rldbg.control.hub import find_hub

    hub = None if gate.active() is not None else find_hub()
    if hub is None:
        return   # a gate already, or no hub in this job (yet): look again later
    try:
        g = gate.DriverGate(hub, float(ray.get(hub.info.remote(), timeout=10).get("gate_timeout_s") or 30.0))
    except Exception:  # noqa: BLE001 - a hub going away counts as none
        return
    try:
        g.refresh()
    except Exception:  # noqa: BLE001
        g.close()
        return
    gate.install(g)
