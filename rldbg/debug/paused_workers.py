"""Paused workers as users name them: role, rank, method, debugpy address. The dashboard knows a
paused worker by pid/port (num_paused_threads != 0); its running task gives the method, and the
identity it published (registry.py) gives role(s) and rank, whatever the trainer's actor repr.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import asdict, dataclass

from rldbg.dashboard import Dashboard
from rldbg.debug.registry import ListeningWorker, identify, identities_or_empty
from rldbg.debug.specs import role_matches
from rldbg.profilers.targets import Target, is_local


@dataclass
class PausedWorker:
    role: str
    rank: int | None
    world: int | None
    method: str | None
    task: str | None
    host: str
    port: int | None
    pid: int
    node_id: str
    worker_id: str
    actor_id: str | None
    paused_threads: int
    cwd: str | None = None

    address = ListeningWorker.address   # "host:port"
    label = Target.label                # "role rank R", or "role pid P" without a rank

    def to_dict(self) -> dict:
        return {**asdict(self), "address": self.address}


def _local_cwd(pid: int, ip: str) -> str | None:
    # Only meaningful when the worker runs on this machine.
    if is_local(ip):
        with contextlib.suppress(OSError):
            return os.readlink(f"/proc/{pid}/cwd")
    return None


def _proc_title_method(pid: int, ip: str) -> str | None:
    """The method a local worker is executing right now, from the process title Ray sets
    at task start ("ray::Class.method"). Unlike task events, which reach the dashboard a
    second or more late, the title is never stale."""
    if not is_local(ip):
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            title = f.read().split(b"\0", 1)[0].decode(errors="replace").strip()
    except OSError:
        return None
    if not title.startswith("ray::") or "." not in title:
        return None  # idle actors are titled "ray::Class"
    return title.rsplit(".", 1)[-1].strip() or None


def _running_task(dash: Dashboard, worker: dict, wait_s: float) -> dict:
    """The task a paused worker is in. Task events reach the dashboard late, so a task
    that already finished can still read RUNNING while the paused one is not listed yet:
    prefer the task the process title names, else the newest, and look again briefly."""
    deadline = time.monotonic() + wait_s
    while True:
        tasks = dash.tasks(detail=True, filters=[("worker_id", "=", worker["worker_id"]), ("state", "=", "RUNNING")])
        if (now := _proc_title_method(int(worker["pid"]), worker.get("ip") or "")) is not None:
            named = [t for t in tasks if (t.get("name") or "").rsplit(".", 1)[-1] == now]
            if named or time.monotonic() >= deadline:
                return max(named, key=lambda t: t.get("start_time_ms") or 0) if named else {"name": now}
        elif tasks or time.monotonic() >= deadline:
            return max(tasks, key=lambda t: t.get("start_time_ms") or 0) if tasks else {}
        time.sleep(0.25)


def list_paused(dash: Dashboard, task_wait_s: float = 3.0) -> list[PausedWorker]:
    out = []
    workers = dash.paused_workers()
    identities = identities_or_empty(dashboard=dash.address) if workers else {}
    for w in workers:
        task = _running_task(dash, w, task_wait_s)
        name = task.get("name") or task.get("func_or_class_name")
        actor_id = task.get("actor_id")
        # repr_name is a detail column of the state API. The running task shows up a moment
        # after the pause starts; until then the actor is found by its live pid.
        found = (dash.actors(detail=True, filters=[("actor_id", "=", actor_id)]) if actor_id else
                 dash.actors(detail=True, filters=[("pid", "=", int(w["pid"])), ("state", "=", "ALIVE")]))
        actor = found[0] if found else {}
        actor_id = actor_id or actor.get("actor_id")
        ident = identify({**actor, "actor_id": actor_id}, identities)
        role = ident.role if ident else (
            actor.get("class_name") or (name.rsplit(".", 1)[0] if name and "." in name else "task"))
        out.append(PausedWorker(
            role=role, rank=ident.rank if ident else None, world=ident.world if ident else None,
            method=name.rsplit(".", 1)[-1] if name else None, task=name,
            host=w.get("ip") or "127.0.0.1", port=w.get("debugger_port"), pid=int(w["pid"]),
            node_id=w.get("node_id", ""), worker_id=w["worker_id"], actor_id=actor_id,
            paused_threads=int(w.get("num_paused_threads") or 0), cwd=_local_cwd(int(w["pid"]), w.get("ip") or "")))
    out.sort(key=lambda p: (p.role, p.rank if p.rank is not None else -1, p.pid))
    return out


class TargetError(ValueError):
    """A target that names no paused worker; one line for the user."""


TARGET_FORM = "HOST:PORT, ROLE:RANK (a paused worker), or nothing (the only paused worker)"


def resolve_target(target: str | None, dash_factory) -> tuple[str, int, PausedWorker | None]:
    """-> (host, port, worker or None). dash_factory is called only when the
    dashboard is needed, so `attach 127.0.0.1:5678` works without Ray."""
    if target:
        host, sep, tail = target.rpartition(":")
        if not sep or not host:
            raise TargetError(f"bad target {target!r}: expected {TARGET_FORM}")
        # Role names never contain dots, so an IP, [IPv6], localhost or a dotted host
        # name is an address; a bare word is a role.
        if host == "localhost" or host.startswith("[") or "." in host:
            if not tail.isdigit() or not 0 < int(tail) < 65536:
                raise TargetError(f"bad target {target!r}: {tail!r} is not a port (1-65535); expected {TARGET_FORM}")
            return host.strip("[]"), int(tail), None
        if not tail.isdigit():
            raise TargetError(f"bad target {target!r}: the part after ':' must be a port or a rank; expected {TARGET_FORM}")
        role, rank = host, int(tail)
        paused = list_paused(dash_factory())
        for p in paused:
            if p.rank == rank and role_matches(role, p.role):
                return p.host, int(p.port), p
        listing = ", ".join(f"{p.role}:{p.rank}" for p in paused) or "none"
        raise TargetError(f"no paused worker {role}:{rank}; paused now: {listing}")
    paused = list_paused(dash_factory())
    if not paused:
        raise TargetError("no paused workers (nothing is waiting at a breakpoint); see `rldbg breakpoints`")
    if len(paused) > 1:
        listing = ", ".join(f"{p.role}:{p.rank} ({p.address})" for p in paused)
        raise TargetError(f"{len(paused)} workers are paused; pick one: {listing}")
    p = paused[0]
    return p.host, int(p.port), p
