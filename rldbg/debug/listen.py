"""Debug mode: workers of chosen roles listen for a debugger from start-up, without pausing
(the port itself, and pausing at a breakpoint, are debugpy_port.py).

    RLDBG_LISTEN_ROLES=actor,critic   roles whose workers listen ("*": all roles)
    RLDBG_LISTEN_RANKS=1              optional: only these ranks (1, 0,1, 0|1, 0-3)

maybe_listen(roles, rank, world) runs once per worker at start-up (set_worker_identity). A
chosen worker opens debugpy on 127.0.0.1:<free port> without waiting (pydevd's tracer stays off
until a client adds a breakpoint: trace_when_needed), registers the port with Ray (debugger_port)
and in Ray's internal KV (registry.py), where `rldbg attach --role` and `rldbg vscode
--attach-role` find it. RLDBG_RANK / RLDBG_ROLE are builtins there, for conditional breakpoints
such as `RLDBG_RANK == 1`; every debugger stop is reported like an rldbg breakpoint (install_pause_hook).

Security: debugpy has no authentication; anyone who reaches the port runs code in the
worker. The listener binds 127.0.0.1 unless RLDBG_DEBUG_ALLOW_REMOTE=1 (debugpy_port.py).
"""
from __future__ import annotations

import builtins
import contextlib
import os
import sys
import sysconfig
import time

from rldbg.debug.registry import key_for, put
from rldbg.debug.specs import parse_ranks, role_matches

from rldbg.switches import LISTEN_RANKS as RANKS_ENV, LISTEN_ROLES as ROLES_ENV

_state: dict = {"entry": None}


def check_env(environ=None) -> None:
    """Raise ValueError (one line) for a bad RLDBG_LISTEN_RANKS; a driver may call it
    before starting workers so the mistake shows up front, not in worker logs."""
    parse_ranks((os.environ if environ is None else environ).get(RANKS_ENV), RANKS_ENV)


def chosen(roles, rank: int, environ=None) -> bool:
    """True when this process (holding `roles`: a list, or "actor+reward") at `rank` should listen."""
    env = os.environ if environ is None else environ
    have = roles if isinstance(roles, str) else "+".join(map(str, roles))
    wanted = (env.get(ROLES_ENV) or "").replace(";", ",").split(",")
    if not any(w.strip() and role_matches(w.strip(), have) for w in wanted):
        return False
    ranks = parse_ranks(env.get(RANKS_ENV), RANKS_ENV)
    return ranks is None or rank in ranks


def maybe_listen(roles, rank: int, world: int) -> dict | None:
    """The registry entry of this worker's listener, opened when its role and rank are chosen, else
    None. Never raises: a bad debug setting must not stop training (it prints one line instead)."""
    if not os.environ.get(ROLES_ENV):
        return None
    if _state["entry"] is not None:
        return _state["entry"]
    try:
        # every role of a colocated worker: set_worker_identity passes them
        have = [r for r in roles.split("+") if r] if isinstance(roles, str) else [str(r) for r in roles]
        return _listen(have, rank, world) if chosen(have, rank) else None
    except Exception as e:  # noqa: BLE001
        print(f"rldbg: debug mode not started on rank {rank}: {e}", file=sys.stderr, flush=True)
        return None


def _listen(roles: list[str], rank: int, world: int) -> dict:
    import ray

    from rldbg.debug import debugpy_port

    host, port = debugpy_port.ensure_listening()  # 127.0.0.1 unless allowed; sets Ray's debugger_port
    from ray.util import debugpy as ray_debugpy
    ray_debugpy._override_breakpoint_hooks()  # debugpy takes over breakpoint(); give it back to Ray
    ctx = ray.get_runtime_context()
    actor_id = ctx.get_actor_id()
    entry = {"role": "+".join(roles), "roles": roles, "rank": int(rank), "world": int(world), "host": host,
             "port": int(port), "pid": os.getpid(), "node_id": ctx.get_node_id(),
             "node_ip": ray.util.get_node_ip_address(), "job_id": ctx.get_job_id(), "actor_id": actor_id,
             "actor_name": ctx.get_actor_name(), "worker_id": ctx.get_worker_id(), "cwd": os.getcwd(),
             "purelib": sysconfig.get_paths()["purelib"], "since": time.time()}
    entry["key"] = key_for(entry["job_id"], actor_id or entry["worker_id"])
    builtins.RLDBG_RANK, builtins.RLDBG_ROLE = int(rank), entry["role"]
    install_pause_hook()
    trace_when_needed()
    put(entry)
    _state["entry"] = entry
    print(f"rldbg: {entry['role']} rank {rank} listens for a debugger on {host}:{port} "
          f"(rldbg attach --role {roles[0]} --rank {rank}; rldbg vscode --attach-role {roles[0]})",
          file=sys.stderr, flush=True)
    return entry


# --- full speed until a client sets breakpoints -----------------------------------------------
# debugpy.listen switches pydevd's tracer on in this thread at once; with no breakpoint it still runs on every Python
# call (measured: ~1.6x step time on the demo). Switch it off and back on, in every thread, when a client first adds a
# breakpoint (pydevd then also re-traces the frames already running, so a line in the current call is hit too).
_tracing = {"deferred": False}


def trace_when_needed() -> bool:
    import pydevd
    import pydevd_tracing

    if getattr(pydevd, "PYDEVD_USE_SYS_MONITORING", False) or _tracing["deferred"]:
        return False  # Python 3.12+: sys.monitoring costs nothing until breakpoints exist
    original = pydevd.PyDB.on_breakpoints_changed

    def on_breakpoints_changed(self, removed=False):
        if not removed and _tracing["deferred"]:
            _tracing["deferred"] = False
            pydevd_tracing.set_trace_to_threads(self.trace_dispatch)
        return original(self, removed)

    pydevd.PyDB.on_breakpoints_changed = on_breakpoints_changed
    _tracing["deferred"] = True
    pydevd_tracing.SetTrace(None)  # this (the actor's task) thread; idle helper threads stay as they are
    return True


# --- reporting debugger stops --------------------------------------------------------------
# A DAP breakpoint stops inside pydevd, not through rldbg.breakpoint(), so nothing in rldbg would notice. pydevd parks
# every suspended thread in PyDB.do_wait_suspend(thread, frame, ...) until it is resumed; wrapping that one method tells
# us where and for how long a thread is stopped, with no tracing of our own. Ray's num_paused_threads is what the
# dashboard, `rldbg breakpoints` and the Ray Distributed Debugger read as "paused".

_BREAK_REASONS = {111: "breakpoint", 122: "exception", 137: "exception"}  # pydevd CMD_* ids


def install_pause_hook() -> bool:
    import pydevd

    current = pydevd.PyDB.do_wait_suspend
    if getattr(current, "_rldbg", False):
        return False

    def do_wait_suspend(self, thread, frame, event, arg, *args, **kwargs):
        from rldbg.debug import breakpoints as bp
        from rldbg.debug.debugpy_port import ray_worker

        reason = _BREAK_REASONS.get(getattr(thread, "stop_reason", None))
        entry = bp.record_external_stop(frame, f"dap {reason}", thread.ident) if reason and frame else None
        pause = None
        try:
            if (worker := ray_worker()) is not None:   # Ray counts the thread as paused while this is held
                pause = worker.worker_paused_by_debugger()
                pause.__enter__()
        except Exception:  # noqa: BLE001 - reporting must never break the debugger
            pause = None
        try:
            return current(self, thread, frame, event, arg, *args, **kwargs)
        finally:
            if pause is not None:
                with contextlib.suppress(Exception):
                    pause.__exit__(None, None, None)
            if entry is not None:
                bp.release_stop(entry)

    do_wait_suspend._rldbg = True
    pydevd.PyDB.do_wait_suspend = do_wait_suspend
    return True
