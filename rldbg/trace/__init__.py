"""Tracing: events from every process of a Ray job into one Perfetto trace.

    import rldbg
    rldbg.trace.start("trace.json.gz", memory_hz=10)   # driver, after ray.init()
    ...
    rldbg.trace.stop()                                  # or: with rldbg.trace.tracing(path): ...

Layout: events (record format) → recorder (per-process buffer + flusher) → collector (one actor,
spills to disk) → export (Chrome JSON for Perfetto) → report (analysis) / tp (SQL checks).
"""
from rldbg.trace.session import collector_handle, last_losses, loss_line, start, stop, tracing

__all__ = ["start", "stop", "tracing", "collector_handle", "last_losses", "loss_line"]
