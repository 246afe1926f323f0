"""How well the processes' clocks were aligned to the collector's (who ran where is the store's
tracks: rldbg.store.queries)."""
from __future__ import annotations

from rldbg.trace.report_trace import finite_number


def clock(start: dict) -> dict | None:
    """The trace's clock alignment (its start record's args, rldbg.store): max uncertainty and
    per-process offsets, or None."""
    c = start.get("clock") if isinstance(start, dict) else None
    if not isinstance(c, dict):
        return None
    # An uncertainty that is not a finite number (an edited trace) is no figure to print.
    u = c.get("max_uncertainty_ns")
    return {"aligned": c.get("aligned", True) is not False,
            "max_uncertainty_ns": u if finite_number(u) else None,
            "processes": c.get("processes") if isinstance(c.get("processes"), dict) else {}}
