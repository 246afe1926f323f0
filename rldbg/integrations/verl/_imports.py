"""Run a function right after a module finishes importing (or now, if it already has).

VeRL's worker modules bind names like `from verl.utils.fsdp_utils import offload_fsdp_optimizer`
at import time, and Ray imports worker classes fresh in each worker process; patching must
therefore happen the moment the defining module has executed, before anyone imports from it.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading

_pending: dict[str, list] = {}
_lock = threading.Lock()


def when_imported(name: str, fn) -> None:
    mod = sys.modules.get(name)
    if mod is not None and getattr(getattr(mod, "__spec__", None), "_initializing", False) is False:
        fn(mod)
        return
    with _lock:
        _pending.setdefault(name, []).append(fn)
        if _Finder not in [type(f) for f in sys.meta_path]:
            sys.meta_path.insert(0, _Finder())


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        with _lock:
            hooks = _pending.pop(module.__name__, [])
        for fn in hooks:
            fn(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _Finder):
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader)
                return spec
            if spec is not None:
                return None
        return None
