"""Hybrid-engine transitions as rldbg transition spans (memory before and after, what each one
frees or loads), wrapped where they are defined as soon as their module loads:
  engines          VeRL's FSDP/Megatron offload/load helpers, before the engines bind them with
                   `from ... import`
  hybrid worker    its rollout (a `BaseRollout`: vLLM's, SGLang's, TensorRT-LLM's ServerAdapter, or
                   a user's own) woken with `resume(tags)`, put to sleep with `release()`, on the
                   calling rank's track; the memory is the rollout server's, on the same GPU, so the
                   device's used bytes at the edges show what it gave back
  rollout servers  the server actors a replica drives (`wake_up`, `sleep`, `release_kv_cache`,
                   `resume_kv_cache`); a server joins the trace as role `rollout_replica<R>`, rank =
                   its node in the replica
Declared categories follow the reference trainer's ledger names: VeRL's tag "weights" is
`rollout_weights`, "kv_cache" is `kv_cache`; a wake-up without tags loads both. A rollout
transition inside another (an override calling super(), an adapter whose server runs in the same
process) is recorded once, as the outer one.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools

from rldbg import instrument
from rldbg.integrations.verl.hooks import MARK, around, wrap_every_subclass

FSDP = {
    "offload_fsdp_model_to_cpu": {"frees": ("params", "grads")},
    "offload_fsdp2_model_to_cpu": {"frees": ("params", "grads")},
    "load_fsdp_model_to_gpu": {"loads": ("params", "grads")},
    "load_fsdp2_model_to_gpu": {"loads": ("params", "grads")},
    "offload_fsdp_optimizer": {"frees": ("optimizer",)},
    "load_fsdp_optimizer": {"loads": ("optimizer",)},
}
MEGATRON = {
    "offload_megatron_model_to_cpu": {"frees": ("params", "grads")},
    "load_megatron_model_to_gpu": {"loads": ("params", "grads")},
    "offload_megatron_copy_params": {"frees": ("params",)},
    "load_megatron_copy_params": {"loads": ("params",)},
    "offload_megatron_optimizer": {"frees": ("optimizer",)},
    "load_megatron_optimizer": {"loads": ("optimizer",)},
}
TAGS = {"weights": "rollout_weights", "kv_cache": "kv_cache"}
BOTH = ("rollout_weights", "kv_cache")

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("rldbg_verl_rollout", default=False)
_named = [False]


@contextlib.contextmanager
def _span(name: str, declared: dict):
    with instrument.transition(name, **declared):
        yield []


def patch_helpers(mod, table: dict) -> None:
    for name, declared in table.items():
        fn = getattr(mod, name, None)
        if callable(fn):
            setattr(mod, name, around(fn, lambda args, kwargs, n=name, d=declared: _span(n, d)))


def _wake(args, kwargs) -> dict:
    raw = kwargs.get("tags", args[0] if args else None)
    if not raw:
        return {"loads": BOTH}
    tags = [raw] if isinstance(raw, str) else [str(t) for t in raw]
    return {"loads": tuple(dict.fromkeys(TAGS.get(t, t) for t in tags)), "tags": tags}


# method -> (transition name, what it declares given the call's arguments)
ADAPTER = {"resume": ("rollout_wake", _wake), "release": ("rollout_sleep", lambda a, k: {"frees": BOTH})}
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


@contextlib.contextmanager
def _outermost(name: str, declare, before, args, kwargs):
    """The rollout method's transition, unless it runs inside another one; `before(self)` first."""
    if _inside.get():
        yield []
        return
    if before is not None:
        before(args[0])
    token = _inside.set(True)
    try:
        with _span(name, declare(args[1:], kwargs)) as result:
            yield result
    finally:
        _inside.reset(token)


def wrap_methods(cls, table: dict, before=None) -> None:
    """Wrap the methods of `table` that `cls` itself defines and implements (not abstract ones)."""
    for method, (name, declare) in table.items():
        fn = vars(cls).get(method)
        if callable(fn) and not getattr(fn, "__isabstractmethod__", False):
            setattr(cls, method, around(fn, functools.partial(_outermost, name, declare, before)))


def patch_rollout_base(mod) -> None:
    """verl.workers.rollout.base: every BaseRollout subclass, defined before or after, gets its
    resume/release wrapped (Ray imports the adapters afresh in each worker process)."""
    from rldbg.integrations.verl import pins

    pins.check_module(mod)
    base = mod.BaseRollout
    if getattr(base, MARK, False):
        return
    wrap_every_subclass(base, lambda cls: wrap_methods(cls, ADAPTER))
    setattr(base, MARK, True)


def name_server(server) -> None:
    """A rollout server is no VeRL Worker: it names itself (once per process) the first time it
    sleeps or wakes, which also finds the trace's collector."""
    if _named[0]:
        return
    _named[0] = True
    with contextlib.suppress(Exception):   # naming must never stop a server from sleeping or waking
        replica = int(getattr(server, "replica_rank", 0) or 0)
        node, nnodes = int(getattr(server, "node_rank", 0) or 0), int(getattr(server, "nnodes", 1) or 1)
        instrument.set_worker_identity(f"rollout_replica{replica}", node, nnodes)


def patch_server(mod) -> None:
    cls = getattr(mod, SERVERS.get(mod.__name__, ""), None)
    if isinstance(cls, type):
        wrap_methods(cls, SERVER, before=name_server)
