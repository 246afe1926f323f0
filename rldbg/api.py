"""User-facing tracing and breakpoint API (filled in by the tracing and breakpoint modules)."""
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
    return None
