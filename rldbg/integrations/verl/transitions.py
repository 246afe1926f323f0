"""Hybrid-engine transitions: VeRL's offload/load helpers as rldbg transition spans (memory
before and after, and what each one frees or loads). They are wrapped in their defining module
as soon as it loads, before VeRL's engines bind them with `from ... import`."""
from __future__ import annotations

import functools

from rldbg import instrument

MARK = "__rldbg_verl__"

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


def wrap(fn, name: str, declared: dict):
    if getattr(fn, MARK, False):
        return fn

    @functools.wraps(fn)
    def transition(*args, **kwargs):
        with instrument.transition(name, **declared):
            return fn(*args, **kwargs)

    setattr(transition, MARK, True)
    return transition


def patch(mod, table: dict) -> None:
    for name, declared in table.items():
        fn = getattr(mod, name, None)
        if callable(fn):
            setattr(mod, name, wrap(fn, name, declared))


def patch_fsdp(mod) -> None:
    patch(mod, FSDP)


def patch_megatron(mod) -> None:
    patch(mod, MEGATRON)
