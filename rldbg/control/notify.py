"""Worker side: tell this job's hub that a breakpoint paused or resumed (/api/state "breakpoints").
Fire-and-forget: never blocks or fails the paused call; costs one failed lookup every RETRY_S when
no hub runs. A hub restarted in the same job is not seen by a worker that found the old one."""
from __future__ import annotations

import time

RETRY_S = 10.0
_cache = {"hub": None, "looked": float("-inf")}


def _send(method: str, *args) -> None:
    if _cache["hub"] is None and time.monotonic() - _cache["looked"] >= RETRY_S:
        from rldbg.control.hub import find_hub
        _cache["looked"] = time.monotonic()
        _cache["hub"] = find_hub()
    if _cache["hub"] is None:
        return
    try:
        getattr(_cache["hub"], method).remote(*args)
    except Exception:  # noqa: BLE001 - the hub went away: look it up again later
        _cache["hub"] = None


def notify_pause(entry: dict) -> None:
    _send("breakpoint_hit", {k: v for k, v in entry.items() if isinstance(v, (str, int, float, type(None)))})


def notify_resume(entry: dict) -> None:
    _send("breakpoint_resumed", entry.get("pid"), entry.get("thread"))
