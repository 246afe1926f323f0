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
    if os.environ.get("RAY_ADDRESS"):
        ctx = ray.init(log_to_driver=True)  # ray.shutdown() later only disconnects
    else:
        # address="local": always our own embedded cluster, even when `ray start` left one
        # recorded on this machine (ray.init would otherwise join it).
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
