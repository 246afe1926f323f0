"""Worker side: tell this job's hub that a breakpoint paused or resumed (for /api/state
"breakpoints.paused"/"hits"). Fire-and-forget: never blocks or fails the paused call, and costs
one failed name lookup every RETRY_S when no hub runs.

rldbg.debug.breakpoints calls these around each pause and debugger stop. The handle is
cached for the process's life: a hub restarted in the same job is not seen by a worker that
already found the old one (its notes go nowhere; nothing fails)."""
from __future__ import annotations

import time

RETRY_S = 10.0
_cache = {"hub": None, "looked": 0.0}


def _hub():
    if _cache["hub"] is not None:
        return _cache["hub"]
    now = time.monotonic()
    if _cache["looked"] and now - _cache["looked"] < RETRY_S:
        return None
    _cache["looked"] = now
    try:
        import ray

        from rldbg.control.hub import NAMESPACE, hub_name
        if not ray.is_initialized():
            return None
        _cache["hub"] = ray.get_actor(hub_name(ray.get_runtime_context().get_job_id()), namespace=NAMESPACE)
    except Exception:
        return None
    return _cache["hub"]


def notify_pause(entry: dict) -> None:
    hub = _hub()
    if hub is None:
        return
    try:
        hub.breakpoint_hit.remote({k: v for k, v in entry.items() if isinstance(v, (str, int, float, type(None)))})
    except Exception:
        _cache["hub"] = None


def notify_resume(entry: dict) -> None:
    hub = _hub()
    if hub is None:
        return
    try:
        hub.breakpoint_resumed.remote(entry.get("pid"), entry.get("thread"))
    except Exception:
        _cache["hub"] = None
