"""Reading the process environment on hot paths.

os.environ.get() of an UNSET variable raises and catches a KeyError inside Mapping.get (≈1.5 µs
here); the worker-call hooks read rldbg's switches on every call, so they read os.environ's raw
mapping instead. Same values as os.environ (its setters keep the raw mapping current). Its own
module, importing nothing of rldbg, so that every module may use it without an import circle.
"""
from __future__ import annotations

import os

_RAW = getattr(os.environ, "_data", None)
_ENCKEY = getattr(os.environ, "encodekey", None)
_DECVAL = getattr(os.environ, "decodevalue", None)
_keys: dict = {}


def env(name: str) -> str | None:
    """os.environ.get(name), cheap when the variable is unset (the common case for switches)."""
    if _RAW is None or _ENCKEY is None:
        return os.environ.get(name)
    key = _keys.get(name)
    if key is None:
        key = _keys[name] = _ENCKEY(name)
    raw = _RAW.get(key)
    return None if raw is None else _DECVAL(raw)


def raw_environ(name: str):
    """(mapping, key) such that `key in mapping` says whether `name` is set, at dict speed."""
    if _RAW is None or _ENCKEY is None:
        return os.environ, name
    return _RAW, _ENCKEY(name)
