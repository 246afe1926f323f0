"""What Python itself costs on this machine, for scale beside rldbg's figures in bench/bench_trace.py:
a call, a `with` on existing and new context managers, the cheapest `with f("x")` there is (C
no-ops), an event kept until shipped, and the shipper's msgpack packing of one. No hook written in
Python can cost less than the matching floor, and the machine's own speed moves these figures
between runs, so bench_trace measures them in the same run as rldbg's."""
from __future__ import annotations

import time


class PyCM:
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        return False


PY_CM = PyCM()


def floor_with(n):
    for _ in range(n):
        with PY_CM:
            pass


class CNoop:
    """enter and exit are builtins (no Python frame), as rldbg's off-span is."""
    __slots__ = ()
    __enter__ = __exit__ = "".format


C_GET = {"x": CNoop()}.get


def floor_c_with(n):
    """The cheapest `with f("x"):` Python has: a C call returning an existing object whose
    enter/exit are C no-ops. An off `with rldbg.span("x")` cannot cost less."""
    for _ in range(n):
        with C_GET("x"):
            pass


def py_span_like(name, /, **args):
    """rldbg.span's signature, doing nothing but return an existing C no-op context manager."""
    return C_NOOP


C_NOOP = CNoop()


def floor_py_with(n):
    """`with f("x"):` where f is a Python function with rldbg.span's signature (name, /, **args):
    the cheapest an off span can be while span() is a Python function (its frame, and the empty
    kwargs dict Python builds for **args on every call)."""
    for _ in range(n):
        with py_span_like("x"):
            pass


def floor_new_cm(n):
    for _ in range(n):
        with PyCMArgs("actor", 0, "m", None):
            pass


class PyCMArgs:
    __slots__ = ("role", "rank", "method", "tag")

    def __init__(self, role, rank, method, tag):
        self.role, self.rank, self.method, self.tag = role, rank, method, tag

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        return False


FLOOR_BUF: list = [None]


def fresh_floor_buf():
    from collections import deque
    FLOOR_BUF[0] = deque()


def floor_buffered(n):
    """What keeping an event until the shipper takes it costs, with nothing of rldbg's: two clock
    reads and a new 11-field tuple (two fresh ints in it) appended to a deque that holds them. On
    this VM much of it is the memory the held events take: a traced span whose event is dropped
    instead of kept cost 780 ns against 1,330 ns in the same run."""
    app, now = FLOOR_BUF[0].append, time.time_ns
    for _ in range(n):
        t = now()
        app(("X", "user", "x", t, now() - t, "driver", 0, None, None, None, None))


def pack_ns(n: int, repeats: int = 5) -> float:
    """The shipper's packing of one such event (rldbg.trace.spill.encode_events, msgpack in C),
    per event of a full batch; best of `repeats`."""
    from rldbg.trace.spill import encode_events
    t = time.time_ns()
    batch = [("X", "user", "x", t + i, 1234, "driver", 0, None, None, None, None) for i in range(min(n, 20_000))]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        encode_events(batch)
        best = min(best, (time.perf_counter_ns() - t0) / len(batch))
    return best


def floor_call(n):
    f = empty_fn
    for _ in range(n):
        f()


def empty_fn():
    pass
