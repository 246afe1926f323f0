"""The VeRL internals this integration relies on, checked where they are patched.

Everything else goes through VeRL's public surface (`@register` attributes, `worker_env`,
`Worker.rank`). If a VeRL release moves one of these, the integration stops with one message
naming the missing piece instead of tracing wrongly. tests/test_verl_pins.py checks them
against the installed VeRL.
"""
from __future__ import annotations

import inspect

SUPPORTED = "0.9"

# (module, attribute path, parameters it must take, or None)
PINNED = [
    ("verl.single_controller.base.decorator", "MAGIC_ATTR", None),
    ("verl.single_controller.base.worker_group", "WorkerGroup._bind_worker_method",
     ("self", "user_defined_cls", "func_generator")),
    ("verl.single_controller.base.worker", "Worker.rank", None),
    ("verl.single_controller.base.worker", "Worker.world_size", None),
    ("verl.single_controller.ray.base", "RayWorkerGroup.__init__", ("self", "resource_pool", "ray_cls_with_init")),
    ("verl.single_controller.ray.base", "RayWorkerGroup.execute_all", ("self", "method_name")),
    ("verl.single_controller.ray.base", "_bind_workers_method_to_parent", ("cls", "key", "user_defined_cls")),
    ("verl.workers.rollout.base", "BaseRollout.resume", ("self", "tags")),
    ("verl.workers.rollout.base", "BaseRollout.release", ("self",)),
]


class VerlVersionError(RuntimeError):
    pass


def check(module, path: str, params) -> object:
    """The object at `path` in `module`, or VerlVersionError naming what moved."""
    obj = module
    try:
        for part in path.split("."):
            obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
    except AttributeError:
        raise VerlVersionError(_msg(f"{module.__name__}.{path} is gone")) from None
    if params:
        fn = obj.fget if isinstance(obj, property) else obj
        got = tuple(inspect.signature(fn).parameters)[: len(params)]
        if got != tuple(params):
            raise VerlVersionError(_msg(f"{module.__name__}.{path} takes {got}, expected {params}"))
    return obj


def check_module(module) -> None:
    for mod, path, params in PINNED:
        if mod == module.__name__:
            check(module, path, params)


def _msg(what: str) -> str:
    try:
        from importlib.metadata import version

        have = f"verl {version('verl')}"
    except Exception:
        have = "an unknown verl"
    return (f"rldbg's VeRL integration supports verl {SUPPORTED}.x ({have} is installed) and {what}; "
            f"unset RLDBG_VERL or install verl=={SUPPORTED}.*")
