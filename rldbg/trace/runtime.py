"""Process-local tracing state: is tracing on here, the recorder, and finding the collector.

A process is traced once it has connected to the collector the driver publishes under the job's
id (trace/address.py). Workers look in set_worker_identity, and again on a traced driver's call
(CallTag.traced) when they started before tracing did; untagged calls re-check every RECHECK_S;
plain Ray code looks on its first span / instant / counter. No Ray, no collector: all no-ops.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time

# Imported with this module, not when tracing starts: a Ray job's driver starts tracing right as
# the job begins, which is when every other node's runtime-env agent unpacks the job's working
# directory; on nodes sharing one machine (ray.cluster_utils, `ray start` twice) that replaces the
# directory the driver imports from for a moment, and a lazy import there failed.
from rldbg.memory.sampler import Sampler
from rldbg.trace import address
from rldbg.trace.recorder import OTHER_SESSION, Recorder, Shipper

RECHECK_S = 10.0


class _State:
    on = False                 # the one flag every hot path reads
    looked_up = False
    recorder: Recorder | None = None
    last_lookup = 0.0
    session_seen = 0           # the newest driver trace session a call told us about
    shipper: Shipper | None = None
    sampler = None
    config: dict = {}
    is_driver = False


STATE = _State()
_lock = threading.Lock()


def emit(ev: tuple) -> None:
    rec = STATE.recorder
    if rec is not None:
        rec.emit(ev)


def attach(link, config: dict, is_driver: bool = False) -> None:
    """Turn recording on in this process, shipping over `link` (recorder.Shipper says what a link
    is). A worker connects again by itself when its link breaks; the driver's link is in-process."""
    with _lock:
        if STATE.on:
            link.close()   # another thread attached first: its link is the one in use
            return
        STATE.recorder = Recorder(int(config.get("buffer_events", 1 << 20)))
        STATE.shipper = Shipper(STATE.recorder, link, float(config.get("flush_interval", 0.1)),
                                on_gone=None if is_driver else functools.partial(detach, flush=False),
                                relookup=None if is_driver else functools.partial(_connect, config.get("origin_ns")),
                                node=_node(), policy=_policy(config))
        STATE.config, STATE.is_driver = config, is_driver
        hz = float(config.get("memory_hz", 0.0))
        STATE.sampler = Sampler(hz, emit) if hz > 0 else None   # 0 Hz: no sampler
        STATE.on = True


def _policy(config: dict):
    """What this process ships (rldbg.trace.window), as the session's config says."""
    from rldbg.trace.window import Ring, StepFilter
    if config.get("window"):
        return Ring(int(config["window"]), int(config.get("buffer_events", 1 << 20)))
    if config.get("steps"):
        return StepFilter(tuple(tuple(r) for r in config["steps"]))
    return None


def ray_node() -> tuple[str, str]:
    """(node id, node IP) of this process as Ray sees it; empty strings without Ray."""
    with contextlib.suppress(Exception):   # where a process runs is never worth failing over
        import ray
        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id() or "", ray.util.get_node_ip_address()
    return "", ""


def _node() -> dict:
    """Where this process runs: the node its worker identity names, else Ray's view of it."""
    from rldbg.context import identity
    ident = identity()
    node_id, node_ip = (ident.node_id, ident.node_ip) if ident.node_id else ray_node()
    return {"node_id": node_id, "node_ip": node_ip} if node_id or node_ip else {}


def detach(flush: bool = True) -> None:
    with _lock:
        if not STATE.on and STATE.shipper is None:
            return
        STATE.on = False
        if STATE.sampler is not None:
            STATE.sampler.stop()
        if STATE.shipper is not None:
            STATE.shipper.close(flush=flush)
        STATE.sampler = STATE.shipper = STATE.recorder = None
        STATE.looked_up = False


def _connect(origin_ns: int | None = None):
    """A new connection to this job's collector, or None. With `origin_ns` (a worker connecting
    again), OTHER_SESSION for the collector of a later trace session: our losses belong to the
    trace that lost them."""
    with contextlib.suppress(Exception):
        import ray
        if not ray.is_initialized():
            return None
        if (entry := address.find(ray.get_runtime_context().get_job_id())) is None:
            return None
        if origin_ns is not None and entry.get("origin_ns") != origin_ns:
            return OTHER_SESSION
        return address.connect(entry)
    return None


def flush() -> None:
    """Ship what this process has buffered now and wait for the collector's acknowledgement."""
    shipper = STATE.shipper   # read once: another thread may detach meanwhile
    if shipper is not None:
        shipper.flush()


def lookup(force: bool = False, session: int = 0) -> bool:
    """Find this job's collector; attach if it exists. Cheap after the first call. `session`
    (from a traced driver's call) forces one look per new session, however recently the last
    look was: a worker created a moment before tracing started must not miss its first calls;
    while it keeps failing, it looks again at most once a second."""
    if STATE.on:
        if not session or session == STATE.config.get("origin_ns") or STATE.is_driver:
            return True
        detach(flush=False)   # a traced call from a newer session: the old collector is gone
    now, recheck_s = time.monotonic(), 1.0 if session else RECHECK_S
    if session and session != STATE.session_seen:
        STATE.session_seen, force = session, True
    if STATE.looked_up and not force and now - STATE.last_lookup < recheck_s:
        return False
    STATE.looked_up, STATE.last_lookup = True, now
    if (link := _connect()) is None:
        return False
    attach(link, link.config)
    return True
