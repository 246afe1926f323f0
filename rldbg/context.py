"""Who is running this code: role, rank, step and method.

Instrumentation sets it; user spans and breakpoints read it. One object per process,
mutated in place, because a worker process runs one call at a time on its main thread
(threaded actors share it, which is acceptable for labelling).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Context:
    role: str = "driver"
    rank: int = 0
    world_size: int = 1
    step: int | None = None
    method: str | None = None
    flow_id: int | None = None
    extra: dict = field(default_factory=dict)


_CTX = Context()


def current() -> Context:
    return _CTX


def set_identity(role: str, rank: int = 0, world_size: int = 1) -> None:
    _CTX.role, _CTX.rank, _CTX.world_size = role, rank, world_size
