"""How the integration attaches to VeRL's code: when a module finishes importing, when a class
is defined, and around one function (sync or async), each wrapped once.

VeRL's worker modules bind names like `from verl.utils.fsdp_utils import offload_fsdp_optimizer`
at import time, and Ray imports worker classes fresh in each worker process: patching must
happen the moment the defining module has executed, before anyone imports from it.
"""
from __future__ import annotations

import functools
import importlib.abc
import inspect
import sys
import threading

MARK = "__rldbg_verl__"   # set on whatever rldbg wrapped or patched, so nothing is wrapped twice

_pending: dict[str, list] = {}
_lock = threading.Lock()


def when_imported(name: str, fn) -> None:
    """Run fn(module) right after module `name` finishes importing (or now, if it already has)."""
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


def wrap_every_subclass(base, wrap) -> None:
    """Call wrap(cls) on every subclass of `base` (Worker, BaseRollout), those defined now and each
    one defined later; the base's own __init_subclass__, if it has one, still runs first."""
    previous = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        wrap(cls)

    def defined_before(cls) -> None:   # a diamond's class is reached twice: wrapped methods are marked
        for sub in cls.__subclasses__():
            wrap(sub)
            defined_before(sub)

    base.__init_subclass__ = classmethod(__init_subclass__)
    defined_before(base)


def patches(owner, name: str):
    """Decorator: the function replaces owner.<name> (its code calls the original, taken before),
    keeping the original's name and doc; where rldbg's replacement is there already, nothing changes."""
    def install(fn):
        old = getattr(owner, name)
        if not getattr(old, MARK, False):
            functools.update_wrapper(fn, old)
            setattr(fn, MARK, True)
            setattr(owner, name, fn)
        return fn

    return install


def around(fn, scope):
    """`fn`, sync or async, called inside the context manager `scope(args, kwargs)`. The scope
    yields a list; fn's result is put in it, and what the list holds when the scope closes is
    returned (a scope may check or replace the result there, still inside its spans). The scope
    may take keywords of its own out of `kwargs` before fn sees them."""
    if getattr(fn, MARK, False):
        return fn
    if inspect.iscoroutinefunction(fn):
        async def wrapper(*args, **kwargs):
            with scope(args, kwargs) as result:
                result.append(await fn(*args, **kwargs))
            return result[-1]
    else:
        def wrapper(*args, **kwargs):
            with scope(args, kwargs) as result:
                result.append(fn(*args, **kwargs))
            return result[-1]
    functools.update_wrapper(wrapper, fn)
    setattr(wrapper, MARK, True)
    return wrapper
