"""Who is running this code: role(s), rank, world, node, and the current step and method.

Two things live here:
  * Context: role/rank/step/method of the code running now. Instrumentation sets it; user spans
    and breakpoints read it. One object per process, mutated in place, because a worker process
    runs one call at a time on its main thread (threaded actors share it: fine for labelling).
  * WorkerIdentity: what a worker process IS (set once at actor start through
    rldbg.instrument.set_worker_identity). Its label, e.g. "actor+reward[rank 1/2]", is formatted by
    worker_label() and read back by parse_label(): rldbg owns the format, a trainer that wants its
    actors' repr to show it calls worker_label(). rldbg's CLI finds identities through the registry
    set_worker_identity publishes (rldbg.debug.registry), whatever a trainer's repr looks like.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Context:
    """Role/rank/step/method of the code running now in this process. Slotted: every registered call
    writes and restores five of these fields, and rldbg/_api_c.c does so at their slots."""

    role: str = "driver"
    rank: int = 0
    world_size: int = 1
    step: int | None = None
    method: str | None = None
    flow_id: int | None = None
    extra: dict = field(default_factory=dict)


_CTX = Context()


def current() -> Context:
    """This process's Context (one object, mutated in place)."""
    return _CTX


def set_identity(role: str, rank: int = 0, world_size: int = 1) -> None:
    """Label this process's events and breakpoints with role/rank (a plain-Ray user may call it)."""
    _CTX.role, _CTX.rank, _CTX.world_size = role, rank, world_size


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
    if not roles or not all(isinstance(r, str) and r and "[" not in r and " " not in r for r in roles):
        raise ValueError(f"bad role {role!r}: a non-empty name without spaces or '[', or a list of them")
    return roles


def worker_label(roles, rank: int, world: int) -> str:
    """("actor", "reward"), 1, 2 -> "actor+reward[rank 1/2]" (a str role may already hold "+")."""
    return f"{'+'.join(_roles(roles))}[rank {int(rank)}/{int(world)}]"


def parse_label(text: str | None) -> WorkerIdentity | None:
    """"actor+reward[rank 1/2]" -> WorkerIdentity(("actor", "reward"), 1, 2); None for anything
    worker_label() did not produce."""
    text = (text or "").strip()
    head, sep, tail = text.partition("[rank ")
    if not sep or not head or not tail.endswith("]"):
        return None
    rank, slash, world = tail[:-1].partition("/")
    if not (slash and rank.isdigit() and world.isdigit()):
        return None
    try:
        return WorkerIdentity(_roles(head), int(rank), int(world))
    except ValueError:
        return None


_IDENT: list = [None]


def set_worker(ident: WorkerIdentity) -> None:
    """Record what this process is (rldbg.instrument.set_worker_identity calls it)."""
    _IDENT[0] = ident
    set_identity(ident.roles[0], ident.rank, ident.world)


def identity() -> WorkerIdentity:
    """This worker's identity; for a process that never set one, the current context's role/rank."""
    ident = _IDENT[0]
    if ident is None:
        return WorkerIdentity((_CTX.role,), _CTX.rank, _CTX.world_size)
    return ident
