"""VeRL 0.9's rollout sleep/wake as rldbg transitions (memory before and after, what each frees or
loads), like the FSDP/Megatron offload helpers (transitions.py).

Two places put a rollout to sleep and wake it up:
  the hybrid worker   its rollout (a `BaseRollout`: vLLM's, SGLang's and TensorRT-LLM's
                      ServerAdapter, or a user's own) is woken with `resume(tags)` and put to
                      sleep with `release()`, inside the worker's registered calls
                      (update_weights, ...): the transition is on that rank's track. The memory
                      lives in the rollout server's process on the same GPU; the device's used
                      bytes at the transition's edges show what it gave back.
  the rollout servers the server actors a replica drives (`wake_up`, `sleep`, `release_kv_cache`,
                      `resume_kv_cache`), called by the controller through the checkpoint
                      manager (`sleep_replicas`, ...) or by the hybrid worker's adapter. A server
                      joins the trace as role `rollout_replica<R>`, rank = its node in the replica.

Declared categories follow the reference trainer's ledger names: VeRL's tag "weights" is
`rollout_weights`, "kv_cache" is `kv_cache`; a wake-up without tags loads both.
A transition inside another (a subclass's override calling super(), an adapter whose server runs
in the same process) is recorded once, as the outer one.
"""
from __future__ import annotations

import contextvars
import functools
import inspect

from rldbg import instrument
from rldbg.integrations.verl.subclasses import wrap_every_subclass

MARK = "__rldbg_verl__"
TAGS = {"weights": "rollout_weights", "kv_cache": "kv_cache"}
BOTH = ("rollout_weights", "kv_cache")

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("rldbg_verl_rollout", default=False)


def _tags(args, kwargs) -> tuple:
    tags = kwargs.get("tags", args[0] if args else None)
    if not tags:
        return BOTH
    if isinstance(tags, str):
        tags = (tags,)
    return tuple(dict.fromkeys(TAGS.get(str(t), str(t)) for t in tags))


def _wake(args, kwargs) -> dict:
    raw = kwargs.get("tags", args[0] if args else None)
    declared = {"loads": _tags(args, kwargs)}
    if raw:
        declared["tags"] = [raw] if isinstance(raw, str) else [str(t) for t in raw]
    return declared


# method -> (transition name, what it declares given the call's arguments)
ADAPTER = {
    "resume": ("rollout_wake", _wake),
    "release": ("rollout_sleep", lambda a, k: {"frees": BOTH}),
}
SERVER = {
    "wake_up": ("rollout_wake", _wake),
    "sleep": ("rollout_sleep", lambda a, k: {"frees": BOTH}),
    "release_kv_cache": ("release_kv_cache", lambda a, k: {"frees": ("kv_cache",)}),
    "resume_kv_cache": ("resume_kv_cache", lambda a, k: {"loads": ("kv_cache",)}),
}
# The async rollout servers of VeRL 0.9 (each module imports its engine: they load only where it
# is installed, so these are patched when, and where, their module loads).
SERVERS = {
    "verl.workers.rollout.vllm_rollout.vllm_async_server": "vLLMHttpServer",
    "verl.workers.rollout.sglang_rollout.async_sglang_server": "SGLangHttpServer",
    "verl.workers.rollout.trtllm_rollout.trtllm_async_server": "TRTLLMHttpServer",
}


def wrap(fn, name: str, declare, before=None):
    """`fn` (a method, sync or async) inside a transition named `name`; `declare(args, kwargs)`
    gives its frees/loads; `before(self)` runs first (a server names itself there)."""
    if getattr(fn, MARK, False):
        return fn
    if inspect.iscoroutinefunction(fn):
        async def transition(self, *args, **kwargs):
            if _inside.get():
                return await fn(self, *args, **kwargs)
            if before is not None:
                before(self)
            token = _inside.set(True)
            try:
                with instrument.transition(name, **declare(args, kwargs)):
                    return await fn(self, *args, **kwargs)
            finally:
                _inside.reset(token)
    else:
        def transition(self, *args, **kwargs):
            if _inside.get():
                return fn(self, *args, **kwargs)
            if before is not None:
                before(self)
            token = _inside.set(True)
            try:
                with instrument.transition(name, **declare(args, kwargs)):
                    return fn(self, *args, **kwargs)
            finally:
                _inside.reset(token)
    functools.update_wrapper(transition, fn)
    setattr(transition, MARK, True)
    return transition


def wrap_class(cls, table: dict, before=None) -> None:
    """Wrap the methods of `table` that `cls` itself defines and implements (not abstract ones)."""
    for method, (name, declare) in table.items():
        fn = vars(cls).get(method)
        if callable(fn) and not getattr(fn, "__isabstractmethod__", False):
            setattr(cls, method, wrap(fn, name, declare, before))


def patch_rollout_base(mod) -> None:
    """verl.workers.rollout.base: every BaseRollout subclass, defined before or after, gets its
    resume/release wrapped (Ray imports the adapters afresh in each worker process)."""
    from rldbg.integrations.verl import pins

    pins.check_module(mod)
    base = mod.BaseRollout
    if getattr(base, MARK, False):
        return
    wrap_every_subclass(base, lambda cls: wrap_class(cls, ADAPTER))
    setattr(base, MARK, True)

_named = [False]


def name_server(server) -> None:
    """A rollout server is no VeRL Worker: it names itself (once per process) the first time it
    sleeps or wakes, which also finds the trace's collector."""
    if _named[0]:
        return
    _named[0] = True
    try:
        replica = int(getattr(server, "replica_rank", 0) or 0)
        node, nnodes = int(getattr(server, "node_rank", 0) or 0), int(getattr(server, "nnodes", 1) or 1)
        instrument.set_worker_identity(f"rollout_replica{replica}", node, nnodes)
    except Exception:   # noqa: BLE001 - naming must never stop a server from sleeping or waking
        pass


def patch_server(mod) -> None:
    cls = getattr(mod, SERVERS.get(mod.__name__, ""), None)
    if isinstance(cls, type):
        wrap_class(cls, SERVER, before=name_server)
