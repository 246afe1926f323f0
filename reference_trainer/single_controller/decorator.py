"""@register: one declarative line per remote method (how the driver's call is split and
merged, and whether it blocks)."""
from __future__ import annotations

from dataclasses import dataclass

from reference_trainer.single_controller.dispatch import Dispatch, DispatchMode, resolve_mode

_ATTR = "_registration"


@dataclass(frozen=True)
class Registration:
    mode: DispatchMode
    blocking: bool


def register(dispatch_mode: DispatchMode | str = Dispatch.ONE_TO_ALL, blocking: bool = True):
    mode = resolve_mode(dispatch_mode)

    def decorate(fn):
        setattr(fn, _ATTR, Registration(mode, blocking))
        return fn

    return decorate


def registered_methods(cls) -> dict[str, Registration]:
    """Registered methods of a worker class, including inherited ones."""
    found: dict[str, Registration] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            reg = getattr(value, _ATTR, None)
            if reg is not None:
                found[name] = reg
    return found
