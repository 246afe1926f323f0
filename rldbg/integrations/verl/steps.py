"""Driver step markers for a VeRL program.

With VeRL's trainer (RayPPOTrainer and subclasses), a step is what `self.global_steps` says:
each assignment ends the previous step and starts the new one. A program without it gets steps
from the order of its calls: the loop's first call is the call that comes round again (of those
that repeat, the one first seen earliest), and each time it comes round a new step starts. The
first pass runs before any repeat is known: when the loop comes round the first time, step 1 is
recorded after the fact, from that call's first time to now, and the report gives its calls
(recorded with no step) that number.
"""
from __future__ import annotations

import contextlib
import threading
import time

from rldbg import instrument
from rldbg.trace import runtime as _rt
from rldbg.trace.events import NUMBERED_AFTER, slice_event

_lock = threading.Lock()


class _Steps:
    def __init__(self):
        self.from_trainer = False
        self.current = None
        self._cm = None
        self._first: dict = {}   # (role, method) -> (its order of first call, when: unix ns)
        self._count: dict = {}
        self._anchor = None
        self._session = None

    def start(self, n: int) -> None:
        with _lock:
            self._close()
            self.current = n
            self._cm = instrument.step(n)
            self._cm.__enter__()

    def _close(self) -> None:
        if self._cm is not None:
            cm, self._cm = self._cm, None
            with contextlib.suppress(Exception):
                cm.__exit__(None, None, None)

    def close(self) -> None:
        with _lock:
            self._close()

    def on_call(self, role: str, method: str):
        """The step a driver call belongs to (starting a new one when the loop comes round)."""
        self._sync_session()
        if self.from_trainer:
            return self.current
        key = (role, method)
        self._first.setdefault(key, (len(self._first), time.time_ns()))
        n = self._count[key] = self._count.get(key, 0) + 1
        if n >= 2 and (self._anchor is None or self._first[key] < self._first[self._anchor]):
            if self._anchor is None and _rt.STATE.on:   # step 1, recorded now that it is known
                t0 = self._first[key][1]
                _rt.emit(slice_event("step", "step 1", t0, time.time_ns() - t0, "driver", 0, 1, None, None,
                                     {"step": 1, NUMBERED_AFTER: True}))
            self._anchor = key
        if key == self._anchor:
            self.start(n)
        return self.current

    def _sync_session(self) -> None:
        session = id(_rt.STATE.recorder) if _rt.STATE.on else None
        if session != self._session:
            # A new trace (or none): steps are learnt again, not carried over from an earlier
            # program in this process, whose call order says nothing about this one.
            with _lock:
                self._close()
                self.__init__()
                self._session = session

    def set_trainer_step(self, value) -> None:
        self._sync_session()
        if isinstance(value, int) and not isinstance(value, bool) and value != self.current:
            self.from_trainer = True
            self.start(value)


STEPS = _Steps()


class _GlobalSteps:
    """A data descriptor standing in for RayPPOTrainer.global_steps: stores the value on the
    instance as before and marks the step."""

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        try:
            return obj.__dict__["global_steps"]
        except KeyError:
            raise AttributeError("global_steps") from None

    def __set__(self, obj, value):
        obj.__dict__["global_steps"] = value
        STEPS.set_trainer_step(value)


def patch_trainer_module(mod) -> None:
    cls = getattr(mod, "RayPPOTrainer", None)
    if cls is not None and not isinstance(cls.__dict__.get("global_steps"), _GlobalSteps):
        cls.global_steps = _GlobalSteps()
