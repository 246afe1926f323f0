"""User-facing tracing and breakpoint API. The tracing module replaces the no-op
bodies; breakpoint() delegates to rldbg.debug.breakpoints."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def _noop_span():
    yield


def span(name: str, **args):
    return _noop_span()


def instant(name: str, **args) -> None:
    return None


def counter(name: str, **values) -> None:
    return None


def breakpoint(role=None, rank=None, step=None, when=None) -> None:  # noqa: A001
    try:
        from rldbg.debug.breakpoints import breakpoint as _bp
    except ImportError:
        return None
    return _bp(role=role, rank=rank, step=step, when=when)
