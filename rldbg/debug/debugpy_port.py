"""This process's one debugpy port, opened on demand (debug mode's listen.py opens it here too), and the ways rldbg
stops a client on it: block until a client attaches, stop in a frame we choose, report an exception.

Not ray.util.debugpy.set_trace: it stops in whoever called it, which from rldbg is rldbg. Ray's pieces are reused (port
lock, GCS port registration, `worker_paused_by_debugger`, which bumps num_paused_threads so the dashboard and VS Code's
Ray Distributed Debugger list the pause) and pydevd is handed the user's frame.

Security: debugpy has NO authentication; whoever reaches the port can run any code in the worker. Ray listens on the
node IP; rldbg on 127.0.0.1 unless the node IP is loopback already or RLDBG_DEBUG_ALLOW_REMOTE=1.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import sys
import warnings

from rldbg.switches import DEBUG_ALLOW_REMOTE as ALLOW_REMOTE_ENV

log = logging.getLogger(__name__)
_listen_host: str | None = None


def choose_host(node_ip: str) -> str:
    """Loopback unless explicitly allowed otherwise."""
    try:
        loopback = ipaddress.ip_address(node_ip).is_loopback
    except ValueError:
        loopback = node_ip == "localhost"
    if loopback or os.environ.get(ALLOW_REMOTE_ENV) == "1":
        return node_ip
    warnings.warn(f"rldbg: Ray's node IP is {node_ip}, not loopback; the debugpy listener binds 127.0.0.1 instead "
                  f"because debugpy has no authentication. Attach from this host (rldbg attach 127.0.0.1:PORT), or "
                  f"set {ALLOW_REMOTE_ENV}=1 to listen on {node_ip} (anyone who can reach it can run code in this "
                  "worker). To keep all of Ray on loopback start it with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 and "
                  "--node-ip-address=127.0.0.1.", RuntimeWarning, stacklevel=3)
    return "127.0.0.1"


def ray_worker():
    """The connected Ray worker, or None outside Ray."""
    try:
        import ray
    except ImportError:
        return None
    return ray._private.worker.global_worker if ray.is_initialized() else None


def ensure_listening() -> tuple[str, int]:
    """(host, port) of this worker's debugpy listener, opened on first use (debugpy.listen runs once
    per process: Ray's own breakpoint() reuses the port registered here, and this one Ray's)."""
    global _listen_host
    import debugpy
    from ray.util import debugpy as ray_debugpy

    worker = ray_worker()
    if worker is None:
        raise RuntimeError("rldbg breakpoints need a Ray worker or driver (ray.init() first)")
    with ray_debugpy.debugger_port_lock:
        port = worker.debugger_port
        if not port:
            _listen_host, port = debugpy.listen((choose_host(worker.node_ip_address), 0))
            worker.set_debugger_port(port)
            log.info("rldbg: debugpy is listening on %s:%s", _listen_host, port)
        # Whatever client attaches (VS Code's gutter, rldbg attach), a breakpoint on a `def`,
        # decorator, docstring, blank or comment line would never stop: rldbg.debug.lines moves it.
        try:
            from rldbg.debug.lines import install_pydevd_hook
            install_pydevd_hook()
        except Exception as e:  # noqa: BLE001 - a debugger without the hook still works
            log.warning("rldbg: breakpoint lines are not checked in this worker: %s", e)
        return (_listen_host or worker.node_ip_address, int(port))


def wait_for_client(message: str) -> None:
    """Block (counted as paused by the dashboard) until a DAP client attaches; with one attached
    already, debugpy returns at once and the stop goes into that session."""
    import debugpy
    from ray.util import debugpy as ray_debugpy

    worker = ray_worker()
    # debugpy overrides breakpoint(); keep plain breakpoint() going to Ray.
    ray_debugpy._override_breakpoint_hooks()
    print(message, file=sys.stderr, flush=True)
    with worker.worker_paused_by_debugger():
        debugpy.wait_for_client()


def stop_in(frame) -> None:
    """Ask pydevd to stop at the next line executed in `frame` (a step-over whose
    stop frame is the user's), so the client sees the user's code, not rldbg."""
    import pydevd

    pydevd.settrace(stop_at_frame=frame)


def stop_on_exception(exc_info) -> None:
    """Report `exc_info` as an uncaught exception to the attached client; the client
    must have sent setExceptionBreakpoints {filters: [uncaught]} to be stopped."""
    import threading

    import pydevd

    py_db = pydevd.get_global_debugger()
    thread = threading.current_thread()
    info = py_db.set_additional_thread_info(thread)
    info.is_tracing += 1
    try:
        py_db.stop_on_unhandled_exception(py_db, thread, info, exc_info)
    finally:
        info.is_tracing -= 1
