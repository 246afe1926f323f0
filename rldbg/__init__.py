"""rldbg: debugging and profiling for reinforcement learning on Ray.

The public API is what this module exports (`__all__`); everything else under rldbg is internal and
may change. A trainer, an integration or user code imports `rldbg` (or `from rldbg import NAME`) and
nothing deeper; tests/test_import_graph.py holds the bundled trainer to that.

Any Ray code (all cheap no-ops when tracing is off):
    rldbg.span(name, **args)       context manager / decorator
    rldbg.instant(name, **args)    a point event
    rldbg.counter(name, **values)  a counter sample
    rldbg.breakpoint(role=, rank=, step=, when=)
    rldbg.current()                this call's role, rank, world, method and step
    rldbg.set_identity(...)        name this process's role and rank for events outside the seam

Running a traced job (the driver, after ray.init()):
    rldbg.trace                    start(path, ...), stop(), tracing(path), dump(why), last_dumps(), loss_line(path)
    rldbg.control                  start(port=, gate_timeout_s=) the hub behind `rldbg top`, stop(),
                                   release(why) a parked step gate (safe in a signal handler)
    rldbg.worker_env(...) / rldbg.runtime_env(...)   every RLDBG_* switch for worker processes
    rldbg.switches                 the name of every RLDBG_* switch (BREAKPOINTS, LISTEN_RANKS, PROFILE ...)

A dispatch layer (the seam; see the README's contract section):
    rldbg.instrument               call_begin / call_ready / call_dispatched / call_waiting /
                                   call_collected / call_failed, step(n), set_worker_identity,
                                   worker_call, method_entry, post_mortem_guard, transition, ledger, enabled
    rldbg.NonFinite                what a call with NaN/Inf output raises (sentinel mode "stop")
    rldbg.configure_nonfinite(mode, failures_dir)    the driver's sentinel mode and failures directory
    rldbg.check_nonfinite(role, method, step, result)  the driver's check of a merged result
    rldbg.actor_death(err, timeout=None)   why Ray says an actor died: ActorDeath(cause, ip, pid, error)

Checking a configuration before anything starts (each raises ValueError naming the bad value):
    rldbg.parse_breakpoint(text, known_roles=, known_methods=)   ROLE.METHOD[@rank=R][,step=S][,when=EXPR]
    rldbg.parse_ranks(text, what)          "1", "0,1", "0-3", "*" -> ranks (None: every rank)
    rldbg.parse_steps(spec)                trace step windows, "100-110,500"
    rldbg.check_trace_path(path)           RuntimeError when a live run writes the trace at `path`

Names load on first use, so `import rldbg` (and `import rldbg.switches` from VeRL's plugin hook in
every VeRL process) costs next to nothing until a process records or debugs.
"""
from __future__ import annotations

import importlib

_WHERE = {
    "span": ("rldbg.api", "span"),
    "instant": ("rldbg.api", "instant"),
    "counter": ("rldbg.api", "counter"),
    "breakpoint": ("rldbg.api", "breakpoint"),
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
