"""rldbg: debugging and profiling for reinforcement learning on Ray.

The public API is what this module exports (`__all__`); everything else under rldbg is internal and
may change. A trainer, an integration or user code imports `rldbg` (or `from rldbg import NAME`) and
nothing deeper; tests/test_import_graph.py holds the bundled trainer to that.

    span / instant / counter / breakpoint / current / set_identity   any Ray code (no-ops when not tracing)
    trace, control, worker_env, runtime_env, switches                running a traced job (the driver)
    instrument, NonFinite, configure_nonfinite, check_nonfinite,      a dispatch layer (the seam; the
    actor_death, ActorDeath                                           README's contract section)
    parse_breakpoint, parse_ranks, parse_steps, check_trace_path      checking a configuration before
                                                                      anything starts (one-line errors)

Names load on first use, so `import rldbg` (and `import rldbg.switches` from VeRL's plugin hook in
every VeRL process) costs next to nothing until a process records or debugs.
"""
from __future__ import annotations

import importlib

_WHERE = {
    "span": ("rldbg.api", "span"),
    "instant": ("rldbg.api", "instant"),
    "counter": ("rldbg.api", "counter"),
    "breakpoint": ("rldbg.debug.breakpoints", "breakpoint"),
    "current": ("rldbg.context", "current"),
    "set_identity": ("rldbg.context", "set_identity"),
    "worker_env": ("rldbg.launch_env", "worker_env"),
    "runtime_env": ("rldbg.launch_env", "runtime_env"),
    "switches": ("rldbg.switches", None),
    "trace": ("rldbg.trace", None),
    "control": ("rldbg.control", None),
    "instrument": ("rldbg.instrument", None),
    "NonFinite": ("rldbg.sentinel", "NonFinite"),
    "configure_nonfinite": ("rldbg.sentinel", "configure"),
    "check_nonfinite": ("rldbg.sentinel", "check_merged"),
    "actor_death": ("rldbg.debug.death", "actor_death"),
    "ActorDeath": ("rldbg.debug.death", "ActorDeath"),
    "parse_breakpoint": ("rldbg.debug.specs", "parse"),
    "parse_ranks": ("rldbg.debug.specs", "parse_ranks"),
    "parse_steps": ("rldbg.trace.window", "parse_steps"),
    "check_trace_path": ("rldbg.trace.session", "check_path_free"),
}

__all__ = list(_WHERE)


def __getattr__(name: str):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'rldbg' has no attribute {name!r}")
    module = importlib.import_module(where[0])
    value = module if where[1] is None else getattr(module, where[1])
    globals()[name] = value   # later lookups are plain module attributes: no cost on hot paths
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
