"""Who is running this code: role(s), rank, world, node, and the current step and method.

  * Context: role/rank/step/method of the code running now, an immutable record. Each call a
    worker serves (rldbg.instrument.worker_call) runs under its own, in a ContextVar for the
    call's duration: two calls running at once on one async or threaded actor each label their
    events and breakpoints with their own. Code outside any call (the sampler, the shipper, a
    user's thread) sees the process's record: its identity and, on a controller, its step.
  * WorkerIdentity: what a worker process IS (set once at actor start through
    rldbg.instrument.set_worker_identity). rldbg owns its label's format, "actor+reward[rank 1/2]"
    (worker_label() writes it, parse_label() reads it); the CLI finds identities through the
    registry set_worker_identity publishes, whatever a trainer's repr looks like.
"""
from __future__ import annotations

import re
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Context:
    """Role/rank/step/method of the code running now. Immutable: a call's record is replaced,
    never changed, so a record handed to other code (a breakpoint's condition, a snapshot's
    name) keeps saying what it said."""

    role: str = "driver"
    rank: int = 0
    world_size: int = 1
    step: int | None = None
    method: str | None = None
    flow_id: int | None = None


# The process's record (a one-item list: replaced whole, read without a lock) and the record of
# the call running in this thread or asyncio task, when it runs in one.
_PROCESS = [Context()]
_CALL: ContextVar[Context | None] = ContextVar("rldbg_call", default=None)
_get_call = _CALL.get


def current() -> Context:
    """The record of the call running here (in this thread or asyncio task), else the process's."""
    c = _get_call()
    return _PROCESS[0] if c is None else c


def set_identity(role: str, rank: int = 0, world_size: int = 1) -> None:
    """Label this process's events and breakpoints with role/rank (a plain-Ray user may call it)."""
    _PROCESS[0] = replace(_PROCESS[0], role=role, rank=rank, world_size=world_size)


def set_step(step: int | None) -> int | None:
    """The process's step from now on (a controller's: rldbg.instrument.step); returns the one before."""
    prev = _PROCESS[0].step
    _PROCESS[0] = replace(_PROCESS[0], step=step)
    return prev


def enter_call(role: str, rank: int, method: str, step, flow_id) -> Token:
    """Run what follows in this thread or task as `method` of role/rank; leave_call(token) ends it."""
    return _CALL.set(Context(role, rank, current().world_size, step, method, flow_id))


leave_call = _CALL.reset   # leave_call(token): the call enter_call opened is over


@dataclass(frozen=True)
class WorkerIdentity:
    """One worker process: the roles it serves (several when colocated), its rank and world size
    in its worker group, and where it runs."""

    roles: tuple
    rank: int
    world: int
    node_id: str = ""
    node_ip: str = ""

    @property
    def role(self) -> str:
        """The roles joined by "+" ("actor+reward"): how rldbg names a colocated worker."""
        return "+".join(self.roles)

    @property
    def label(self) -> str:
        return worker_label(self.roles, self.rank, self.world)

    def has_role(self, role: str) -> bool:
        return role in ("*", self.role) or role in self.roles

    def to_dict(self) -> dict:
        return {"roles": list(self.roles), "role": self.role, "rank": self.rank, "world": self.world,
                "node_id": self.node_id, "node_ip": self.node_ip, "label": self.label}

    @classmethod
    def from_dict(cls, d: dict) -> "WorkerIdentity":
        roles = d.get("roles") or str(d.get("role") or "").split("+")
        return cls(tuple(roles), int(d.get("rank") or 0), int(d.get("world") or 1),
                   d.get("node_id") or "", d.get("node_ip") or "")


def _roles(role) -> tuple:
    roles = tuple(role.split("+")) if isinstance(role, str) else tuple(role)
    # '.' and ':' would be read as ROLE.METHOD in a breakpoint spec and ROLE:RANK by `rldbg attach`
    if not roles or not all(isinstance(r, str) and r and not any(c in r for c in " [.:") for r in roles):
        raise ValueError(f"bad role {role!r}: a non-empty name without spaces, '[', '.' or ':', or a list of them")
    return roles


_LABEL = re.compile(r"(.+)\[rank ([0-9]+)/([0-9]+)\]")


def worker_label(roles, rank: int, world: int) -> str:
    """("actor", "reward"), 1, 2 -> "actor+reward[rank 1/2]" (a str role may already hold "+")."""
    return f"{'+'.join(_roles(roles))}[rank {int(rank)}/{int(world)}]"


def parse_label(text: str | None) -> WorkerIdentity | None:
    """"actor+reward[rank 1/2]" -> WorkerIdentity(("actor", "reward"), 1, 2); None for anything
    worker_label() did not produce."""
    m = _LABEL.fullmatch((text or "").strip())
    try:
        return None if m is None else WorkerIdentity(_roles(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return None


_IDENT: list = [None]


def set_worker(ident: WorkerIdentity) -> None:
    """Record what this process is (rldbg.instrument.set_worker_identity calls it)."""
    _IDENT[0] = ident
    set_identity(ident.roles[0], ident.rank, ident.world)


def identity() -> WorkerIdentity:
    """This worker's identity; for a process that never set one, the current context's role/rank."""
    if (ident := _IDENT[0]) is not None:
        return ident
    c = current()
    return WorkerIdentity((c.role,), c.rank, c.world_size)
