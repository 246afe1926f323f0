"""Live control of a run: the hub actor (HTTP API for `rldbg top`) and the driver's step gate.

    import rldbg.control
    info = rldbg.control.start()          # after ray.init(); {"url", "token", "job_id", "file"}
    ... train (the seam calls rldbg.control.gate.before_dispatch / after_collect) ...
    rldbg.control.stop()                  # rldbg.control.release(why) from a signal handler: a parked gate lets go

Security: the API listens on 127.0.0.1 by default and requires the per-run bearer token
(random, written to ~/.rldbg/hub-<job_id>-<driver pid>.json with mode 0600, see discovery.py). Pass host="0.0.0.0" only on a
trusted network: anyone with the token can pause the run and export its trace.
"""
from __future__ import annotations

import atexit
import os
import secrets
import time

from rldbg.control import gate
from rldbg.control.hub import NAMESPACE, hub_name

_session: dict = {}


def start(port: int = 0, token: str | None = None, gate_timeout_s: float = 30.0,
          host: str = "127.0.0.1", poll_s: float = 0.25) -> dict:
    """Start this job's hub and the driver gate. Returns {url, token, job_id, file}."""
    if not 0 <= int(port) < 65536:
        raise ValueError(f"port={port!r} must be in 0..65535 (0 picks a free one)")
    if gate_timeout_s <= 0:
        raise ValueError(f"gate_timeout_s={gate_timeout_s!r} must be > 0")
    if _session:
        raise RuntimeError(f"the control hub is already running at {_session['url']}; call rldbg.control.stop() first")
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rldbg.control.discovery import run_id, write_hub_file
    from rldbg.control.hub import ControlHub
    from rldbg.own_actors import own_actor_class

    if not ray.is_initialized():
        raise RuntimeError("rldbg.control.start() needs Ray: call ray.init() first")
    ctx = ray.get_runtime_context()
    job = ctx.get_job_id()
    token = token or secrets.token_urlsafe(24)
    # Pinned to the driver's node: 127.0.0.1 there is this machine, and export reads the spill.
    cls = own_actor_class(ray, ControlHub, max_concurrency=16)
    try:
        hub = cls.options(name=hub_name(job), namespace=NAMESPACE, lifetime=None,
                          scheduling_strategy=NodeAffinitySchedulingStrategy(ctx.get_node_id(), soft=False),
                          ).remote(job, token, host, int(port), float(gate_timeout_s))
        info = ray.get(hub.info.remote(), timeout=60)
    except ValueError as e:
        raise RuntimeError(f"cannot start the control hub for job {job}: {e}") from None
    except ray.exceptions.RayActorError as e:
        raise RuntimeError(f"the control hub for job {job} failed to start: {str(e).splitlines()[0]}") from None
    # pid is the driver's: a stale file (driver killed before stop()) names a process that is gone.
    info = {"url": info["url"], "token": token, "job_id": job, "pid": os.getpid(), **_cluster_identity(ray)}
    path = write_hub_file(info)
    gate.install(gate.DriverGate(hub, gate_timeout_s, poll_s))
    _session.update(info, hub=hub, file=str(path), run=run_id(job))
    atexit.register(_at_exit)
    return {"url": info["url"], "token": token, "job_id": job, "file": str(path), "run": run_id(job)}


def _cluster_identity(ray) -> dict:
    """The run's own dashboard and Ray session, so CLI commands find this cluster, not :8265."""
    from rldbg.control.discovery import own_dashboard
    dashboard = own_dashboard()
    out = {"dashboard": dashboard} if dashboard else {}
    try:
        out["session"] = ray._private.worker.global_worker.node.session_name
    except Exception:
        pass
    return out


def stop() -> None:
    """Release the gate, stop the hub, remove the hub file. Safe to call twice."""
    if not _session:
        return
    import ray

    from rldbg.control.discovery import remove_hub_file

    gate.install(None)
    hub, job = _session["hub"], _session["job_id"]
    try:
        ray.get(hub.shutdown.remote(), timeout=5)
    except Exception:
        pass   # already dead: killing it below is all that is left
    try:
        ray.kill(hub)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:   # ray.kill is async; a start() right after needs the name
            try:
                ray.get_actor(hub_name(job), namespace=NAMESPACE)
            except ValueError:
                break
            time.sleep(0.05)
    except Exception:
        pass
    finally:
        remove_hub_file(job, _session.get("pid"))
        _session.clear()


def hub_handle():
    """The hub actor of this driver's session, or None."""
    return _session.get("hub")


def info() -> dict | None:
    return {k: _session[k] for k in ("url", "token", "job_id", "file", "run")} if _session else None


def _at_exit() -> None:
    try:
        stop()
    except Exception:
        pass


def release(why: str) -> None:
    """The driver is stopping (a signal): a step gate parked at a pause returns within about a second
    and stays open from now on. Safe to call from a signal handler; a no-op without a hub."""
    gate.release(why)


__all__ = ["start", "stop", "release", "hub_handle", "info"]
