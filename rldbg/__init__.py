"""rldbg: debugging and profiling for reinforcement learning on Ray.

User-facing API (all cheap no-ops when tracing is off):
    rldbg.span(name, **args)       context manager / decorator
    rldbg.instant(name, **args)    a point event
    rldbg.counter(name, **values)  a counter sample
    rldbg.breakpoint(role=, rank=, step=, when=)
    rldbg.worker_env(...) / rldbg.runtime_env(...)   every RLDBG_* switch for worker processes
The trainer contract (hooks a dispatch layer calls) is rldbg.instrument; see the README.
"""
from rldbg.context import current, set_identity
from rldbg.api import span, instant, counter, breakpoint
from rldbg.switches import runtime_env, worker_env

__all__ = ["span", "instant", "counter", "breakpoint", "current", "set_identity", "worker_env", "runtime_env"]
