"""User-facing tracing API, for any Ray code (trainer or not).

    with rldbg.span("compute_advantages", n=len(batch)): ...     # or @rldbg.span("score")
    rldbg.instant("eval_done", acc=0.9)
    rldbg.counter("throughput", tokens_per_s=1234.0)

Events inherit role/rank/step/method from rldbg.context: the record of the call they run in
(two calls at once on an async actor label their events apart). When tracing is off everything is
a flag check; a process looks for the collector once, on its first call (see trace/runtime.py).
"""
from __future__ import annotations

import functools
import time

from rldbg.context import current as _current
from rldbg.trace import runtime as _rt
from rldbg.trace.events import counter_event as _counter, instant_event as _instant, slice_event as _slice
from rldbg.trace.spill import pack_event as _pack

_STATE = _rt.STATE
_now = time.time_ns


class _Span:
    """Context manager and decorator. Timing starts on __enter__, so one object may be reused."""

    __slots__ = ("name", "args", "t0")

    def __init__(self, name: str, args: dict):
        self.name, self.args, self.t0 = name, args, 0

    def __enter__(self):
        # The flag first: while tracing is on, entering costs no function call besides the clock.
        self.t0 = _now() if _STATE.on or (not _STATE.looked_up and _rt.lookup()) else 0
        return self

    def __exit__(self, et, ev, tb):
        rec = _STATE.recorder
        if self.t0 and rec is not None:
            c = _current()
            # No args: None, not an empty dict (nothing to pack, ship or export for it).
            args = (self.args or None) if et is None else dict(self.args, error=et.__name__)
            # Inlined Recorder.emit: the hot path is one length check, the packing and a deque append.
            buf = rec.buf
            if len(buf) < rec.capacity:
                buf.append(_pack(_slice("user", self.name, self.t0, _now() - self.t0, c.role, c.rank, c.step,
                                        c.method, None, args)))
            else:
                rec.dropped += 1
        return False

    def __call__(self, fn):
        """fn wrapped in a new span per call."""
        name, args = self.name, self.args

        @functools.wraps(fn)
        def wrapper(*a, **kw):
            with _Span(name, args):
                return fn(*a, **kw)
        return wrapper


class _OffSpan(_Span):
    """Returned while tracing is off. Entering and leaving are C no-ops: a bound builtin method is not a descriptor, so
    the with-statement calls "".format() with its own arguments only, which returns "" (falsy: exceptions propagate;
    `as` binds "" while off) without a Python frame. As a decorator it still builds a real span per call, so functions
    decorated before tracing started are traced later."""

    __slots__ = ()
    __enter__ = __exit__ = "".format


# One reusable off-span per name (spans without args): while tracing is off, `with span("x")`
# allocates nothing. Bounded, in case a program builds names on the fly.
_OFF: dict = {}
_OFF_MAX = 4096
_OFF_get = _OFF.get


def _check_name(name) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"span name must be a non-empty string, got {name!r}")


def span(name: str, /, **args) -> _Span:
    """A slice named `name` with `args` on the current role/rank's track: `with rldbg.span(...)`
    or `@rldbg.span(...)`. Raises ValueError for an empty or non-string name."""
    if _STATE.on:
        # Tracing: the name checked inline (a call to _check_name only to say what is wrong).
        if type(name) is not str or not name:
            _check_name(name)
        return _Span(name, args)
    if args or not _STATE.looked_up:
        _check_name(name)
        return (_OffSpan if _STATE.looked_up else _Span)(name, args)
    try:
        off = _OFF_get(name)
    except TypeError:   # unhashable: not a name; _check_name says so
        off = None
    if off is None:
        _check_name(name)
        off = _OffSpan(name, args)
        if len(_OFF) < _OFF_MAX:
            _OFF[name] = off
    return off


def instant(name: str, **args) -> None:
    """A point event named `name` with `args` on the current role/rank's track."""
    rec = _STATE.recorder
    if rec is None:
        if _STATE.looked_up or not _rt.lookup():
            return
        rec = _STATE.recorder
    c = _current()
    buf = rec.buf
    if len(buf) < rec.capacity:
        buf.append(_pack(_instant("user", name, _now(), c.role, c.rank, c.step, c.method, args or None)))
    else:
        rec.dropped += 1


def counter(name: str, **values) -> None:
    """One sample of numeric series `values` on the counter track "rank N <name> <series>"."""
    rec = _STATE.recorder
    if rec is None:
        if _STATE.looked_up or not _rt.lookup():
            return
        rec = _STATE.recorder
    for k, v in values.items():
        if not isinstance(v, (int, float)):
            raise ValueError(f"counter {name!r}: values must be numbers, got {k}={v!r}")
    c = _current()
    buf = rec.buf
    if len(buf) < rec.capacity:
        buf.append(_pack(_counter("user", name, _now(), c.role, c.rank, c.step, c.method, values)))
    else:
        rec.dropped += 1
