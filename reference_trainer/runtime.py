"""Where the run executes: an embedded local Ray cluster on loopback when no RAY_ADDRESS is
set, otherwise the cluster RAY_ADDRESS names (as under `ray job submit`)."""
from __future__ import annotations

import os

# Ray binds to the machine's interface address unless this is off and the node IP is
# loopback; it must be set before Ray starts any process (see FACTS: Ray binding).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray  # noqa: E402


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


def lost_peer(groups: dict, err, timeout: float = 60.0):
    """When a rank's call failed because a peer of its collective went away (gloo's "Connection closed
    by peer" on the survivors of a lost node, which Ray reports before the dead rank's own error),
    the RankDied of that peer, recorded in the trace; else None. The dead rank is the one to name:
    the survivor's error only echoes it."""
    import rldbg
    from rldbg.debug import death
    from reference_trainer.single_controller.host import RankDied

    if not death.peer_lost(str(err)):
        return None
    group = groups.get(getattr(err, "role", None)) or next(iter(groups.values()), None)
    if group is None:
        return None
    found = death.first_dead(group.hosts, timeout)
    if found is None:
        return None
    rank, dead = found
    place = group.places[rank] if rank < len(group.places) else {}
    seen = death.where(dead)
    ip, node = place.get("ip") or seen.get("ip") or "?", place.get("node_id")
    died = RankDied(group.role, rank, err.method, err.step, f"{ip} ({node[:8]})" if node else ip, death.cause(dead))
    rldbg.instant("rank_died", role=died.role, rank=rank, method=died.method, step=died.step, node=died.node,
                  cause=died.cause, seen_first=str(err).splitlines()[0][:300])
    return died
