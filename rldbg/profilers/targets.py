"""The worker processes a profiling command points at, found through the Ray dashboard.

Roles and rank come from the identity a worker published (rldbg.debug.registry), else from the
actor name "<run>:actor+critic:rank1" (which also gives the run); the actor's pid and node say
where py-spy must run. Other actors are listed by class and pid unless a role or rank is asked for.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from rldbg.dashboard import Dashboard, DashboardError
from rldbg.debug.registry import identify, identities_or_empty

RLDBG_NAMESPACE = "rldbg"   # where rldbg's own actors live (trace collector, control hub)
_NAME = re.compile(r"^(?P<run>[^:]+):(?P<roles>[\w+\-.]+):rank(?P<rank>\d+)$")


@dataclass
class Target:
    roles: str            # "actor" or "actor+critic" (colocated), or the class name
    rank: int | None
    pid: int
    ip: str
    node_id: str
    actor_id: str
    run: str | None = None
    shown_role: str | None = None   # the role asked for, when colocated roles share the process

    @property
    def role(self) -> str:
        return self.shown_role or self.roles

    @property
    def label(self) -> str:
        return f"{self.role} rank {self.rank}" if self.rank is not None else f"{self.role} pid {self.pid}"

    @property
    def slug(self) -> str:
        tail = f"_rank{self.rank}" if self.rank is not None else f"_pid{self.pid}"
        return (self.role + tail).replace("+", "-")

    @property
    def local(self) -> bool:
        return is_local(self.ip)


def is_local(ip: str) -> bool:
    import psutil   # every interface's address: the host name may resolve to 127.0.0.1 alone, Ray's node IP not
    return (not ip or ip.startswith("127.") or ip in ("localhost", "::1")
            or ip in {a.address for addrs in psutil.net_if_addrs().values() for a in addrs})


def _node_ips(dash: Dashboard) -> dict:
    try:
        return {n.get("node_id"): n.get("node_ip") or n.get("node_ip_address") or "" for n in dash.nodes()}
    except DashboardError:
        return {}


def find(dash: Dashboard, role: str | None = None, rank: int | None = None, run: str | None = None) -> list[Target]:
    """Alive actors matching role (any of a colocated actor's roles), rank and run name."""
    actors = dash.actors(detail=True, filters=[("state", "=", "ALIVE")])
    ips = _node_ips(dash)
    identities = identities_or_empty(dashboard=dash.address) if actors else {}
    out = []
    for a in actors:
        if not a.get("pid") or a.get("ray_namespace") == RLDBG_NAMESPACE:
            continue   # rldbg's own actors (collector, control hub) are not ranks
        ident = identify(a, identities)
        m = _NAME.match(a.get("name") or "")
        roles, rnk = (ident.role, ident.rank) if ident else (
            (m.group("roles"), int(m.group("rank"))) if m else (a.get("class_name") or "actor", None))
        actor_run = m.group("run") if m else None
        if ((role is not None and role not in (roles, *roles.split("+"))) or (rank is not None and rnk != rank)
                or (run is not None and actor_run != run)):
            continue
        node_id = a.get("node_id") or ""
        out.append(Target(roles, rnk, int(a["pid"]), ips.get(node_id, ""), node_id, a.get("actor_id", ""),
                          actor_run, role))
    out.sort(key=lambda t: (t.role, -1 if t.rank is None else t.rank, t.pid))
    return out


def find_or_explain(dash: Dashboard, role: str | None, rank: int | None,
                    run: str | None) -> tuple[list[Target], str | None]:
    """The matching workers, or none and the one-line reason a command should print."""
    if found := find(dash, role, rank, run):
        return found, None
    return [], f"no alive worker matches {describe_filter(role, rank, run)}; roles seen: {role_list(dash)}"


def describe_filter(role, rank, run) -> str:
    parts = [f"role {role!r}" if role else None, f"rank {rank}" if rank is not None else None,
             f"run {run!r}" if run else None]
    return " and ".join(p for p in parts if p) or "any actor"


def role_list(dash: Dashboard) -> str:
    """The roles that do exist, for a "no worker matched" message."""
    return ", ".join(sorted({r for t in find(dash) if t.rank is not None for r in t.roles.split("+")})) or "none"
