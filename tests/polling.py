"""Bounded polling for asynchronous cluster state in tests (a liveness bound, not a timing
assertion): the dashboard, debugpy and hub all report state a moment after it changes."""
from __future__ import annotations

import time


def until(fn, what: str, limit: float = 60.0, interval: float = 0.2):
    """Return fn()'s first truthy value; raise AssertionError naming `what` after `limit` s.
    Exceptions from fn count as "not yet" (the thing being polled may still be starting)."""
    deadline = time.monotonic() + limit
    while True:
        try:
            value = fn()
        except Exception:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {limit:g} s")
        time.sleep(interval)
