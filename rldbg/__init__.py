"""rldbg: debugging and profiling for reinforcement learning on Ray.

User-facing API (all cheap no-ops when tracing is off):
    rldbg.span(name, **args)       context manager / decorator
    rldbg.instant(name, **args)    a point event
    rldbg.counter(name, **values)  a counter sample
    rldbg.breakpoint(role=, rank=, step=, when=)
"""
from rldbg.context import current, set_identity
from rldbg.api import span, instant, counter, breakpoint

__all__ = ["span", "instant", "counter", "breakpoint", "current", "set_identity"]
