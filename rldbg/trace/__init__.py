"""Tracing: events from every process of a Ray job into one Perfetto trace.

    rldbg.trace.start("trace.json.gz", memory_hz=10)   # driver, after ray.init(); then stop(), or tracing(path)
    rldbg.trace.start(path, window=20)                  # the flight recorder: the last 20 steps in memory,
    rldbg.trace.dump("manual")                          # written on a trigger (rldbg.trace.flight)

Layout: events → recorder (per-process buffer + flusher) → wire (TCP) → server → collector (in
the driver, spills to disk) → at stop, the run's store (rldbg.store) → export and report. The
session functions load on first use: a recording process needs none of the collector's Ray glue.
"""
_SESSION = ("start", "stop", "tracing", "last_losses", "loss_line", "dump", "last_dumps")

__all__ = list(_SESSION)


def __getattr__(name: str):
    if name in _SESSION:
        from rldbg.trace import session
        return getattr(session, name)
    raise AttributeError(f"module 'rldbg.trace' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_SESSION))
