"""Where the run executes: an embedded local Ray cluster on loopback when no RAY_ADDRESS is
set, otherwise the cluster RAY_ADDRESS names (as under `ray job submit`)."""
from __future__ import annotations

import os
import re

import ray   # kept on loopback for an embedded cluster by reference_trainer/__init__.py


def start_ray(num_cpus: int) -> bool:
    """Returns True when this call connected (and, without RAY_ADDRESS, started a cluster),
    so the caller must shut down; False when Ray was already initialised by the caller."""
    if ray.is_initialized():
        return False
    if os.environ.get("RAY_ADDRESS", "local") != "local":   # RAY_ADDRESS=local means a new cluster too
        ctx = ray.init(log_to_driver=True)  # ray.shutdown() later only disconnects
    else:
        # address="local": without it Ray joins the newest `ray start` cluster on this machine
        # (/tmp/ray/ray_current_cluster) and fails on num_cpus; a run must get its own cluster.
        ctx = ray.init(address="local", num_cpus=num_cpus, _node_ip_address="127.0.0.1", dashboard_host="127.0.0.1",
                       include_dashboard=True, log_to_driver=True)
    if ctx.dashboard_url:  # rldbg's tools in this process find the dashboard here
        url = ctx.dashboard_url
        os.environ.setdefault("RAY_DASHBOARD_ADDRESS", url if url.startswith("http") else f"http://{url}")
    return True


def cluster_has_gpu() -> bool:
    return ray.cluster_resources().get("GPU", 0) > 0


def stop_ray(started: bool) -> None:
    if started and ray.is_initialized():
        ray.shutdown()


# What a surviving rank's collective raises when a peer's process or node went away first (gloo,
# NCCL, a TCP store): the peer's death is the cause, this error only its echo.
_PEER_LOST = re.compile(r"closed by peer|reset by peer|broken pipe|connection (?:closed|reset|refused)"
                        r"|remote (?:process|worker|peer)|socket timeout|ncclRemoteError", re.IGNORECASE)


def peer_lost(message: str) -> bool:
    """True when an error a rank raised reads like a peer of its collective having gone away."""
    return bool(_PEER_LOST.search(message or ""))


def first_dead(handles: list, timeout: float):
    """(index, rldbg.ActorDeath) of an actor among `handles` that Ray reports dead, asking each one a
    no-op; None when all answer or `timeout` s pass first. A lost node's actors are declared dead
    only once Ray notices the node is gone (its health checks: seconds), hence the wait."""
    import time

    import rldbg

    refs = [h.__ray_ready__.remote() for h in handles]
    index = {ref: i for i, ref in enumerate(refs)}
    pending, deadline = list(refs), time.monotonic() + timeout
    while pending and (left := deadline - time.monotonic()) > 0:
        done, pending = ray.wait(pending, num_returns=1, timeout=left)
        for ref in done:
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as err:
                return index[ref], rldbg.actor_death(err, max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - alive but odd: not the dead peer we look for
                pass
    return None


def lost_peer(groups: dict, err, timeout: float = 60.0):
    """When a rank's call failed because a peer of its collective went away (gloo's "Connection closed
    by peer" on the survivors of a lost node, which Ray reports before the dead rank's own error),
    the RankDied of that peer, recorded in the trace; else None. The dead rank is the one to name:
    the survivor's error only echoes it."""
    import rldbg
    from reference_trainer.single_controller.host import RankDied

    if not peer_lost(str(err)):
        return None
    group = groups.get(getattr(err, "role", None)) or next(iter(groups.values()), None)
    if group is None:
        return None
    found = first_dead(group.hosts, timeout)
    if found is None:
        return None
    rank, dead = found
    place = group.places[rank] if rank < len(group.places) else {}
    ip, node = place.get("ip") or dead.ip or "?", place.get("node_id")
    died = RankDied(group.role, rank, err.method, err.step, f"{ip} ({node[:8]})" if node else ip, dead.cause)
    rldbg.instant("rank_died", role=died.role, rank=rank, method=died.method, step=died.step, node=died.node,
                  cause=died.cause, seen_first=str(err).splitlines()[0][:300])
    return died
