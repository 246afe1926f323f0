"""Starting and stopping a traced run from the driver.

    rldbg.trace.start("runs/trace.json.gz", memory_hz=10)   # after ray.init, before creating actors
    path = rldbg.trace.stop()                                # flushes, exports, returns the trace path
or  with rldbg.trace.tracing("runs/trace.json.gz"): ...

start() creates the collector here with its listener (trace/server.py), publishes where it
listens (trace/address.py) and turns recording on in the driver. Events are spilled to
`<trace path without .json[.gz]>.spill/` as they arrive: after a crash, `rldbg export SPILL_DIR`.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import socket
import sys
import time

from rldbg.trace import address, runtime
from rldbg.trace.collector import Collector
from rldbg.trace.server import CollectorServer, LocalLink

_session: dict = {}
_last_losses: dict | None = None
_last_dumps: list = []
MAX_SETTLE_S = 60.0   # stop() waits at most this long for processes still draining their buffers
DUMP_WAIT_S = 20.0


def spill_dir_for(path: str) -> str:
    return re.sub(r"\.json(\.gz)?$", "", path) + ".spill"


def start(path: str = "rldbg-trace.json.gz", memory_hz: float = 10.0, buffer_events: int = 1 << 20,
          flush_interval: float = 1.0, profile_dir: str | None = None, window: int = 0, steps=None,
          hang_s: float = 60.0) -> str:
    """Begin tracing this Ray job; returns the spill directory. torch.profiler traces in
    `profile_dir` are merged into the exported trace. Each process ships its events every
    `flush_interval` s; a crash loses at most that much. `steps` ("100-110,500"):
    record only those steps. `window` N > 0: the flight recorder (rldbg.trace.flight), the last N
    steps in memory, written only on a trigger as <dir of path>/flight-<step>-<reason>.json.gz; a
    call then counts as hung once it has run 10 times its method's median and at least `hang_s`."""
    if not (path.endswith(".json") or path.endswith(".json.gz")):
        raise ValueError(f"trace path {path!r} must end in .json or .json.gz")
    if memory_hz < 0:
        raise ValueError(f"memory_hz={memory_hz!r} must be >= 0 (0 turns the sampler off)")
    __import__("rldbg.trace.export")   # now: an export at exit may no longer import its thread pool
    from rldbg.trace.window import parse_steps
    if type(window) is not int or window < 0:
        raise ValueError(f"trace window={window!r}: the number of steps each process keeps, an int >= 0 (0: off)")
    ranges = parse_steps(steps)
    if not hang_s > 0:
        raise ValueError(f"trace hang_s={hang_s!r}: seconds a call may run before it counts as hung, > 0")
    if window and ranges:
        raise ValueError("trace window and trace steps: choose one (the flight recorder keeps the last steps, "
                         "step windows record chosen ones)")
    if _session:
        raise RuntimeError(f"tracing already started (writing {_session['path']!r}); call rldbg.trace.stop() first")
    import ray
    if not ray.is_initialized():
        raise RuntimeError("rldbg.trace.start() needs Ray: call ray.init() first")

    path = os.path.abspath(path)
    check_path_free(path)
    spill = spill_dir_for(path)
    job = ray.get_runtime_context().get_job_id()
    config = {"origin_ns": time.time_ns(), "job_id": job, "memory_hz": float(memory_hz),
              "buffer_events": int(buffer_events), "flush_interval": float(flush_interval), "trace_path": path,
              "driver_pid": os.getpid(), "host": socket.gethostname(), "window": window,
              "steps": [list(r) for r in ranges], "hang_s": float(hang_s)}
    collector = Collector(spill, config)
    server = None
    try:
        server = CollectorServer(collector, ray.util.get_node_ip_address())
        address.publish(job, {"address": server.address, "token": server.token, "origin_ns": config["origin_ns"],
                              "trace_path": path, "spill_dir": None if window else spill, "driver_pid": os.getpid(),
                              "host": config["host"]})
    except BaseException:
        if server is not None:
            server.close()
        collector.close()
        raise
    _session.update(path=path, spill=spill, collector=collector, server=server, config=config, profile_dir=profile_dir)
    runtime.STATE.looked_up = False
    runtime.attach(LocalLink(collector), config, is_driver=True)
    if window:
        _hook_excepthook()
    atexit.unregister(_at_exit)   # once per process, however many sessions
    atexit.register(_at_exit)
    return spill


def check_path_free(path: str) -> None:
    """RuntimeError (one line) when a live run is writing the trace at `path`: two live runs must
    not share a spill, the second would wipe the first's events. A dead run's spill that no export
    read (no store beside the trace, or one older than the events) is that run's only record: it
    is moved aside, and said, instead of wiped."""
    from rldbg.control.discovery import alive
    from rldbg.store import store_path_for
    from rldbg.trace.spill import EXT, OLD_EXT, _files, meta_path
    spill = spill_dir_for(os.path.abspath(path))
    try:
        with open(meta_path(spill)) as f:
            old = json.load(f)
        pid, host = int(old.get("driver_pid") or 0), old.get("host")
    except (OSError, ValueError, TypeError, AttributeError):
        return
    if pid and pid != os.getpid() and host == socket.gethostname() and alive({"pid": pid, "host": host}):
        raise RuntimeError(f"trace spill {spill!r} belongs to a run that is still going (driver pid {pid}); "
                           "give this run another trace path (trace.path / trainer.run_dir)")
    store, events = store_path_for(path), _files(spill, EXT) + _files(spill, OLD_EXT)
    if events and not (os.path.exists(store) and os.path.getmtime(store) >= max(map(os.path.getmtime, events))):
        os.rename(spill, aside := f"{spill[:-len('.spill')]}-unexported-{pid}-{time.time_ns()}.spill")
        print(f"rldbg: {spill} held the events of a run never exported (driver pid {pid}); moved to {aside} "
              f"(`rldbg export {aside} -o FILE.json.gz` writes its trace)", file=sys.stderr, flush=True)


def dump(reason: str = "manual", wait_s: float = 0.0, **detail) -> dict | None:
    """Ask the flight recorder for a dump of every process's window (trace.window); returns its
    status ({path, state, ...}); with `wait_s`, after waiting that long at most for it to be
    written. None when no trace runs here; ValueError when the trace keeps no window."""
    if (collector := _session.get("collector")) is None:
        return None
    if collector.dumps is not None:
        runtime.flush()   # what this driver recorded up to now, its newest step above all, reaches the collector first
    st = collector.dump(reason, detail)
    deadline = time.monotonic() + wait_s
    while st["state"] not in ("written", "failed") and time.monotonic() < deadline:
        time.sleep(0.05)
        st = collector.dump_status(st["id"])
    return st


def _hook_excepthook() -> None:
    """An unhandled exception in the driver dumps the flight recorder before the run ends (once per
    process: a later session finds the hook in place)."""
    previous = sys.excepthook
    if getattr(previous, "_rldbg_flight", False):
        return

    def hook(et, ev, tb):
        if _session.get("collector") is not None and not issubclass(et, KeyboardInterrupt):
            with contextlib.suppress(Exception):
                dump("exception", wait_s=DUMP_WAIT_S, error=f"{et.__name__}: {ev}"[:500])
        previous(et, ev, tb)

    hook._rldbg_flight = True
    sys.excepthook = hook


def stop(export: bool = True, settle_s: float = 3.0, reason: str | None = None, **detail) -> str | None:
    """Flush everything, close the collector and write the trace file. Returns its path;
    last_losses() then says what the trace lost (and loss_line() in one line). With the flight
    recorder (trace.window), nothing is written of the run; `reason` (SIGTERM, exception, ...)
    dumps the last window first and returns that dump's path."""
    global _last_losses
    if not _session:
        return None
    flight = None
    if _session["config"].get("window") and reason:
        with contextlib.suppress(Exception):
            flight = dump(reason, wait_s=DUMP_WAIT_S, **detail)
    path, spill, profile_dir = _session["path"], _session["spill"], _session.get("profile_dir")
    interval = _session["config"]["flush_interval"]
    collector, server = _session["collector"], _session["server"]
    _last_losses = None
    try:
        asked = collector.closing_ns = time.time_ns()
        hard_deadline = time.monotonic() + MAX_SETTLE_S
        runtime.detach(flush=True)
        # Every live process ships (or heartbeats) each interval: wait until each has reported
        # since we asked; one that stays silent has died with its unsent events.
        deadline = time.monotonic() + max(settle_s, 2.5 * interval)
        backlog = None
        while time.monotonic() < deadline:
            procs = collector.stats()["processes"]
            if all(p.get("final") or (p.get("last_seen_ns", 0) > asked and not p.get("pending"))
                   for p in procs.values()):
                break
            left = sum(p.get("pending", 0) for p in procs.values())
            if backlog is not None and left < backlog:
                # still draining a big buffer: give it time (what stays is counted, not hidden)
                deadline = max(deadline, min(time.monotonic() + 1.0, hard_deadline))
            backlog = left
            time.sleep(min(interval, 0.2))
        _last_losses = collector.close(asked).get("losses")
        # Every live process hears "closed" before the listener goes (most in answer to their settling
        # batch: Collector.closing_ns), so the first events of a later trace are not spent on this one.
        until = time.monotonic() + interval + 0.5
        while time.monotonic() < until and not collector.all_told_closed():
            time.sleep(min(interval, 0.1))
    finally:
        address.withdraw(_session["config"]["job_id"])
        server.close()
        collector.close()   # closes the spill if the wait above was cut short
        if collector.dumps is not None:
            collector.dumps.wait(DUMP_WAIT_S)   # a dump being written is the run's one record
        window = _session["config"].get("window")
        _session.clear()
    if window:
        _last_dumps[:] = [d.status() for d in collector.dumps.all]
        written = [d for d in _last_dumps if d["state"] == "written"]
        if flight is not None and flight.get("state") == "written":
            return flight["path"]
        return written[-1]["path"] if written else None
    if not export:
        return spill
    from rldbg.trace.export import export_spill
    export_spill(spill, path, extra=_torch_traces(profile_dir))
    return path


def last_dumps() -> list:
    """The flight recorder's dumps of the last stopped trace: [{path, reason, step, state, ...}]."""
    return list(_last_dumps)


def last_losses() -> dict | None:
    """What the last stop()'s trace lost: {"total", "by_cause", "processes", "silent"}."""
    return _last_losses


def loss_line(path: str) -> str:
    """The driver's final line: 'trace written to PATH' or 'trace written with N events lost (...)'."""
    lo = _last_losses or {}
    parts = []
    if lo.get("by_cause"):
        parts.append(", ".join(f"{n} {cause}" for cause, n in sorted(lo["by_cause"].items())))
    for s in lo.get("silent", ()):
        who = f"{s['role']} rank {s['rank']}" if s.get("role") else s["process"]
        parts.append(f"{who} ({s['process']}) stopped reporting: its unsent events are unknown")
    if not parts:
        return f"trace written to {path}"
    return f"trace written with {lo.get('total', 0)} events lost ({'; '.join(parts)}) to {path}"


def _torch_traces(profile_dir: str | None):
    """The exporter's `extra`: torch.profiler traces written under profile_dir by rldbg.profilers,
    their operator slices nested inside the role/rank call that produced them."""
    if not profile_dir or not os.path.isdir(profile_dir):
        return None

    def merge(put, locate, origin):
        from rldbg.profilers.merge import merge_torch_traces

        merge_torch_traces(profile_dir, put, locate, origin, within=(origin, None))
    return merge


@contextlib.contextmanager
def tracing(path: str = "rldbg-trace.json.gz", **kwargs):
    start(path, **kwargs)
    try:
        yield _session.get("spill")
    finally:
        stop()


def _at_exit() -> None:
    with contextlib.suppress(Exception):
        stop()
