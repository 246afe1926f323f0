"""Worker side: every `@register` method of every VeRL Worker class runs inside rldbg's rank span.

Wrapping happens when a class is defined (Worker.__init_subclass__), so it holds in each worker
process, where Ray imports the class afresh. The wrapper takes one extra keyword, the driver's
CallTag; its __signature__ declares it, because Ray checks a call's keywords against the
signature it reads when the class is made remote (after inspect.unwrap, so the wrapper ends the
__wrapped__ chain).
"""
from __future__ import annotations

import contextlib
import inspect
import os

from rldbg import instrument
from rldbg.integrations.verl import pins
from rldbg.integrations.verl.hooks import MARK, around, patches, wrap_every_subclass
from rldbg.switches import VERL_ROLE

TAG = "_rldbg_call"          # the keyword carrying the driver's CallTag to a rank

_identity_set = [False]


@contextlib.contextmanager
def _served(name: str, args, kwargs):
    """The rank's span of one registered call: breakpoint specs at entry, post-mortem and saved
    inputs on an error, the non-finite sentinel on the result (rldbg.instrument's seam)."""
    worker, args, tag = args[0], args[1:], kwargs.pop(TAG, None)
    role, rank = _who(worker, tag)
    with instrument.worker_call(role, rank, name, tag) as scope:
        instrument.method_entry(role, rank, name, tag)
        result: list = []
        with instrument.post_mortem_guard():
            try:
                yield result
            except Exception as exc:
                scope.raised(exc, args, kwargs)   # inputs and error saved where RLDBG_FAILURES_DIR says
                raise
        result[-1] = scope.returned(result[-1], args, kwargs)


def wrap_method(fn, name: str):
    """`fn` (a @register method) inside the rank's span, taking TAG."""
    if getattr(fn, MARK, False):
        return fn
    wrapper = around(fn, lambda args, kwargs: _served(name, args, kwargs))
    wrapper.__signature__ = _with_tag(inspect.signature(fn))
    wrapper.__rldbg_wrapped__ = wrapper.__dict__.pop("__wrapped__")   # Ray unwraps: see the module docstring
    return wrapper


def _with_tag(sig: inspect.Signature) -> inspect.Signature:
    params = list(sig.parameters.values())
    if TAG in sig.parameters:
        return sig
    at = len(params) - 1 if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD else len(params)
    params.insert(at, inspect.Parameter(TAG, inspect.Parameter.KEYWORD_ONLY, default=None))
    return sig.replace(parameters=params)


def wrap_class(cls, magic: str) -> None:
    """Wrap the registered methods `cls` itself defines (inherited ones were wrapped in their class)."""
    for name, fn in list(vars(cls).items()):
        if not isinstance(fn, (staticmethod, classmethod)) and isinstance(getattr(fn, magic, None), dict):
            setattr(cls, name, wrap_method(fn, name))   # a @register method


def _who(worker, tag) -> tuple[str, int]:
    rank = _rank(worker)
    if not _identity_set[0]:
        identify(worker)
    return (tag.group if tag is not None else process_role(worker)), rank


def _rank(worker) -> int:
    try:
        return int(worker.rank)
    except Exception:
        return int(os.environ.get("RANK", "0") or 0)


def process_role(worker) -> str:
    """What this process serves: the roles the driver named (colocated ones joined by '+'),
    else the worker's class name."""
    return os.environ.get(VERL_ROLE) or type(worker).__name__


def identify(worker) -> None:
    """Tell rldbg who this process is (once per process): role(s), rank, world."""
    _identity_set[0] = True
    try:
        world = int(worker.world_size)
    except Exception:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    instrument.set_worker_identity(process_role(worker), _rank(worker), world)


def label(worker) -> str:
    """The actor's repr on the Ray dashboard, "role[rank r/w]", which rldbg's CLI reads back."""
    try:
        return f"{process_role(worker)}[rank {_rank(worker)}/{int(worker.world_size)}]"
    except Exception:
        return object.__repr__(worker)


def patch_worker_module(mod) -> None:
    """Patch verl.single_controller.base.worker.Worker: wrap its own registered methods, wrap every
    subclass as it is defined, name the process after __init__, and give actors rldbg's label."""
    from verl.single_controller.base.decorator import MAGIC_ATTR as magic

    pins.check_module(mod)
    worker_cls = mod.Worker
    if getattr(worker_cls, MARK, False):
        return
    wrap_class(worker_cls, magic)
    init = worker_cls.__init__

    @patches(worker_cls, "__init__")
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not _identity_set[0] and os.environ.get("WG_BACKEND") == "ray":  # a real remote worker
            identify(self)

    if "__repr__" not in vars(worker_cls):
        worker_cls.__repr__ = label
    setattr(worker_cls, MARK, True)
    wrap_every_subclass(worker_cls, lambda cls: wrap_class(cls, magic))
