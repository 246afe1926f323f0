"""Wrapping every subclass of a VeRL base class (Worker, BaseRollout): those defined before the
integration was installed, and each one defined after, through the base's __init_subclass__."""
from __future__ import annotations


def wrap_every_subclass(base, wrap) -> None:
    """Call wrap(cls) on every subclass of `base`, now and as each later one is defined; the base's
    own __init_subclass__, if it has one, still runs first."""
    previous = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        wrap(cls)

    base.__init_subclass__ = classmethod(__init_subclass__)
    for sub in all_subclasses(base):   # classes defined before install()
        wrap(sub)


def all_subclasses(cls) -> list:
    seen, todo = [], list(cls.__subclasses__())
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.append(c)
            todo.extend(c.__subclasses__())
    return seen
