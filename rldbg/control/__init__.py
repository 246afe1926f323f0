"""Live control of a run: start() (after ray.init()) the hub actor behind `rldbg top` and the driver's step gate, which
the seam calls at every worker-group call; stop(); release(why) from a signal handler lets a parked gate go.

Security: the API listens on 127.0.0.1 by default and requires the per-run bearer token (random,
in the 0600 hub file, see discovery.py). Pass host="0.0.0.0" only on a trusted network: anyone
with the token can pause the run and export its trace.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import time

from rldbg.control import gate
from rldbg.control.gate import release
from rldbg.control.hub import NAMESPACE, hub_name

_session: dict = {}


def start(port: int = 0, token: str | None = None, gate_timeout_s: float = 30.0,
          host: str = "127.0.0.1", poll_s: float = 0.25) -> dict:
    """Start this job's hub and the driver gate. Returns info()."""
    if not 0 <= int(port) < 65536:
        raise ValueError(f"port={port!r} must be in 0..65535 (0 picks a free one)")
    if gate_timeout_s <= 0:
        raise ValueError(f"gate_timeout_s={gate_timeout_s!r} must be > 0")
    if _session:
        raise RuntimeError(f"the control hub is already running at {_session['url']}; call rldbg.control.stop() first")
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rldbg.control.discovery import own_dashboard, run_id, write_hub_file
    from rldbg.control.hub import ControlHub

    if not ray.is_initialized():
        raise RuntimeError("rldbg.control.start() needs Ray: call ray.init() first")
    ctx = ray.get_runtime_context()
    job = ctx.get_job_id()
    token = token or secrets.token_urlsafe(24)
    # num_cpus=0: the hub never holds (or waits for) a CPU the job asked for. max_restarts=0: when it dies the gate
    # releases the run. enable_task_events=False: the gate's 4 syncs a second, for the whole run, would each cost the
    # caller and the GCS, fill the dashboard's task list with rldbg's traffic and crowd the user's tasks out of the
    # GCS's bounded task store, where `rldbg breakpoints` looks up a paused worker's task. Pinned to the driver's node:
    # 127.0.0.1 there is this machine, and export reads the spill.
    cls = ray.remote(num_cpus=0, max_restarts=0, enable_task_events=False, max_concurrency=16)(ControlHub)
    try:
        hub = cls.options(name=hub_name(job), namespace=NAMESPACE, lifetime=None,
                          scheduling_strategy=NodeAffinitySchedulingStrategy(ctx.get_node_id(), soft=False),
                          ).remote(job, token, host, int(port), float(gate_timeout_s))
        url = ray.get(hub.info.remote(), timeout=60)["url"]
    except ValueError as e:
        raise RuntimeError(f"cannot start the control hub for job {job}: {e}") from None
    except ray.exceptions.RayActorError as e:
        raise RuntimeError(f"the control hub for job {job} failed to start: {str(e).splitlines()[0]}") from None
    # pid is the driver's: a stale file (driver killed before stop()) names a process that is gone.
    # dashboard and session: CLI commands then find this run's cluster, not :8265.
    node = getattr(ray._private.worker.global_worker, "node", None)
    record = {"url": url, "token": token, "job_id": job, "pid": os.getpid(), "dashboard": own_dashboard(),
              "session": getattr(node, "session_name", None)}
    path = write_hub_file(record)
    gate.install(gate.DriverGate(hub, gate_timeout_s, poll_s))
    _session.update(record, hub=hub, file=str(path), run=run_id(job))
    atexit.register(stop)
    return info()


def stop() -> None:
    """Release the gate, stop the hub, remove the hub file. Safe to call twice."""
    if not _session:
        return
    import ray

    from rldbg.control.discovery import hub_file

    gate.install(None)
    hub, job = _session["hub"], _session["job_id"]
    with contextlib.suppress(Exception):   # already dead: killing it below is all that is left
        ray.get(hub.shutdown.remote(), timeout=5)
    try:
        with contextlib.suppress(Exception):
            ray.kill(hub)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:   # ray.kill is async; a start() right after needs the name
                try:
                    ray.get_actor(hub_name(job), namespace=NAMESPACE)
                except ValueError:
                    break
                time.sleep(0.05)
    finally:
        hub_file(job, _session.get("pid")).unlink(missing_ok=True)
        _session.clear()


def hub_handle():
    """The hub actor of this driver's session, or None."""
    return _session.get("hub")


def info() -> dict | None:
    """{url, token, job_id, file, run} of this driver's hub, or None."""
    return {k: _session[k] for k in ("url", "token", "job_id", "file", "run")} if _session else None


__all__ = ["start", "stop", "release", "hub_handle", "info"]
