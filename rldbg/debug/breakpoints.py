"""Conditional breakpoints for worker code, spec-driven pauses at method entry, and
post-mortem pauses, all over Ray's debugpy integration.

    rldbg.breakpoint(rank=1)                 pause rank 1 only (any role)
    rldbg.breakpoint(role="critic", step=3)  pause the critic at step 3
    rldbg.breakpoint(when=lambda: loss > 10) a callable or a bool

Each pause opens (once per worker) a debugpy listener, shows up in `rldbg breakpoints`, the
dashboard and VS Code's Ray Distributed Debugger, and waits for a client; the stop is reported in
the caller's frame. Plain `breakpoint()` keeps Ray's behaviour.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from rldbg.context import current
from rldbg.debug import debugpy_port
from rldbg.debug.specs import Spec, SpecSet, from_env, matches, role_matches
from rldbg.trace import runtime as _rt
from rldbg.trace.events import BREAKPOINT, instant_event

from rldbg.switches import BREAKPOINTS, POST_MORTEM as POST_MORTEM_ENV, RAY_POST_MORTEM

# Frames we step out of to reach the user's code.
_INTERNAL_MODULES = ("rldbg.api", "rldbg.instrument", "rldbg.debug.", "contextlib")

# What is paused in this process right now, by thread ident (the job's hub hears of each pause
# through control.notify; a debugger client reads this one in the worker).
_lock = threading.Lock()
_paused: dict[int, dict] = {}


def paused() -> list[dict]:
    """Pauses in this process still waiting for a debugger client."""
    with _lock:
        return [dict(v) for v in _paused.values()]


def _user_frame(frame):
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not any(name == m or name.startswith(m) for m in _INTERNAL_MODULES):
            return frame
        frame = frame.f_back
    return None


def _filter_ok(want, have) -> bool:
    return want is None or (have in want if isinstance(want, (list, tuple, set, frozenset, range)) else have == want)


def breakpoint(role=None, rank=None, step=None, when=None) -> None:  # noqa: A001
    """Pause here when the current rldbg context matches every given filter.
    role: a name or list; rank/step: an int or a collection; when: bool or callable."""
    ctx = current()
    roles = [role] if isinstance(role, str) else role
    if roles is not None and not any(role_matches(r, ctx.role or "") for r in roles):
        return
    if not (_filter_ok(rank, ctx.rank) and _filter_ok(step, ctx.step)):
        return
    if not (when is None or (when() if callable(when) else when)):
        return
    _pause(_user_frame(sys._getframe(1)), reason="breakpoint")


def _hold(frame, reason: str, **extra) -> dict:
    """Note a stop in `frame`: paused(), the job's hub (control.notify) and the trace see it."""
    ctx = current()
    entry = {"reason": reason, "file": frame.f_code.co_filename if frame else None,
             "line": frame.f_lineno if frame else None, "function": frame.f_code.co_name if frame else None,
             "role": ctx.role, "rank": ctx.rank, "step": ctx.step, "method": ctx.method, "pid": os.getpid(),
             "thread": threading.get_ident(), "since": time.time(), **extra}
    if _rt.STATE.on or _rt.lookup():
        args = {k: entry[k] for k in ("file", "line", "role", "rank", "step", "method", "reason")}
        _rt.emit(instant_event("user", BREAKPOINT, time.time_ns(), ctx.role, ctx.rank, ctx.step, ctx.method, args))
    with _lock:
        _paused[entry["thread"]] = entry
    _notify("notify_pause", entry)
    return entry


def release_stop(entry: dict) -> None:
    with _lock:
        if _paused.get(entry["thread"]) is entry:
            del _paused[entry["thread"]]
    _notify("notify_resume", entry)


def _notify(name: str, entry: dict) -> None:
    # The job's control hub (TUI, /api/state) hears of the stop; fire-and-forget, never raises.
    from rldbg.control import notify
    getattr(notify, name)(entry)


def _pause(frame, reason: str, spec: Spec | None = None, exc_info=None) -> None:
    if debugpy_port.ray_worker() is None:
        _pause_without_ray(frame, reason)
        return
    host, port = debugpy_port.ensure_listening()
    entry = _hold(frame, reason, host=host, port=port, spec=spec.text if spec else None)
    where = f"{entry['file']}:{entry['line']}"
    who = f"{entry['role']} rank {entry['rank']}" + (f" step {entry['step']}" if entry["step"] is not None else "")
    try:
        debugpy_port.wait_for_client(
            f"rldbg: {reason} in {who} at {where}; waiting for a debugger on {host}:{port} "
            f"(rldbg attach {host}:{port}, or VS Code's Ray Distributed Debugger)")
    finally:
        release_stop(entry)
    if exc_info is not None:
        debugpy_port.stop_on_exception(exc_info)
    else:
        _own_stop.frame = frame  # already recorded above; listen mode must not count it again
        debugpy_port.stop_in(frame)


# --- stops that did not come through rldbg.breakpoint() ----------------------------
# A client's own breakpoint (listen mode) stops inside pydevd; rldbg.debug.listen reports
# it here so paused(), the hub and the trace show it like any other breakpoint.
_own_stop = threading.local()  # the frame rldbg itself is about to stop in (not reported twice)


def record_external_stop(frame, reason: str, thread_ident: int) -> dict | None:
    if getattr(_own_stop, "frame", None) is frame:
        _own_stop.frame = None
        return None
    return _hold(frame, reason, thread=thread_ident)


def _pause_without_ray(frame, reason: str) -> None:
    # Outside Ray (a unit test, a script) only a terminal debugger makes sense.
    if sys.stdin is not None and sys.stdin.isatty():
        import pdb

        pdb.Pdb().set_trace(frame)
    else:
        print(f"rldbg: {reason} at {frame.f_code.co_filename}:{frame.f_lineno} skipped "
              "(no Ray worker and no terminal)", file=sys.stderr)


# --- spec-driven pauses at method entry ---------------------------------------
_active = SpecSet()
_env_cache: tuple[str, list[Spec]] = ("", [])


def active_specs() -> SpecSet:
    """The process-wide SpecSet a trainer or hub pushes into (add/remove live)."""
    return _active


def set_active_specs(specs) -> None:
    """Replace the pushed specs with `specs` (spec strings; all parsed before any is replaced)."""
    parsed = SpecSet(specs).list()
    _active.clear()
    for s in parsed:
        _active.add(s)


def _env_specs() -> list[Spec]:
    global _env_cache
    raw = os.environ.get(BREAKPOINTS, "")
    if raw != _env_cache[0]:
        # A bad env spec must not kill a training run: warn once, skip the specs.
        try:
            _env_cache = (raw, from_env())
        except ValueError as e:
            print(f"rldbg: ignoring {BREAKPOINTS}: {e}", file=sys.stderr)
            _env_cache = (raw, [])
    return _env_cache[1]


def match_method_entry(role: str, rank: int, method: str, step: int | None) -> Spec | None:
    if not _active and not os.environ.get(BREAKPOINTS):
        return None  # the common case costs two lookups
    return _active.match(role, rank, step, method) or next(
        (s for s in _env_specs() if matches(s, role, rank, step, method)), None)


def check_method_entry(role: str, rank: int, method: str, step: int | None = None) -> bool:
    """Called by the seam as a registered method starts. Pauses when a spec matches;
    the stop shows the dispatch frame about to call the method (step in to enter)."""
    spec = match_method_entry(role, rank, method, step)
    if spec is None:
        return False
    _pause(_user_frame(sys._getframe(1)), reason=f"spec {spec.text}", spec=spec)
    return True


# --- post-mortem --------------------------------------------------------------
def post_mortem(exc: BaseException) -> bool:
    """Pause on `exc` (inside its except block) for a debugger; the client sees the raising frame. True if it paused.
    With RAY_DEBUG_POST_MORTEM=1 Ray pauses once the exception leaves the task, so rldbg leaves it to Ray (no double
    pause); RLDBG_POST_MORTEM=1 pauses here, recording role, rank and method."""
    if (os.environ.get(POST_MORTEM_ENV) != "1" or os.environ.get(RAY_POST_MORTEM) == "1"
            or debugpy_port.ray_worker() is None):
        return False
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    frame = tb.tb_frame if tb is not None else _user_frame(sys._getframe(1))
    _pause(frame, reason=f"exception {type(exc).__name__}", exc_info=(type(exc), exc, exc.__traceback__))
    return True


class post_mortem_guard:
    """`with post_mortem_guard(): method(...)` for the seam: pauses on an escaping
    exception when enabled, then lets it propagate unchanged."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None and not isinstance(exc, (KeyboardInterrupt, SystemExit, GeneratorExit)):
            post_mortem(exc)
        return False
