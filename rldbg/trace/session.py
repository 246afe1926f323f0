"""Starting and stopping a traced run from the driver.

    rldbg.trace.start("runs/trace.json.gz", memory_hz=10)   # after ray.init, before creating actors
    ... train ...
    path = rldbg.trace.stop()                                # flushes, exports, returns the trace path
or  with rldbg.trace.tracing("runs/trace.json.gz"): ...

start() creates the collector actor (named after the job, see collector.py) and turns recording on
in the driver; workers find the collector by name (runtime.lookup). Events are spilled to
`<trace path without .json[.gz]>.spill/` as they arrive, so a crash leaves a spill that
`rldbg export SPILL_DIR -o trace.json` turns into a trace.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import time

from rldbg.trace import runtime
from rldbg.trace.collector import NAMESPACE, Collector, collector_name

_session: dict = {}
_atexit_registered = False


def spill_dir_for(path: str) -> str:
    base = path
    for ext in (".json.gz", ".json"):
        if base.endswith(ext):
            base = base[: -len(ext)]
            break
    return base + ".spill"


def start(path: str = "rldbg-trace.json.gz", memory_hz: float = 10.0, buffer_events: int = 1 << 20,
          flush_interval: float = 1.0, profile_dir: str | None = None) -> str:
    """Begin tracing this Ray job; returns the spill directory. torch.profiler traces found in
    `profile_dir` at stop() are merged into the exported trace. Each process ships its events
    every `flush_interval` seconds: on 2 busy cores 0.1 s cost ≈ 8% of a demo step, 1 s is
    within noise (bench/bench_trace_overhead.py); a crash loses at most that much."""
    global _atexit_registered
    if not (path.endswith(".json") or path.endswith(".json.gz")):
        raise ValueError(f"trace path {path!r} must end in .json or .json.gz")
    if memory_hz < 0:
        raise ValueError(f"memory_hz={memory_hz!r} must be >= 0 (0 turns the sampler off)")
    if _session:
        raise RuntimeError(f"tracing already started (writing {_session['path']!r}); call rldbg.trace.stop() first")
    import ray
    if not ray.is_initialized():
        raise RuntimeError("rldbg.trace.start() needs Ray: call ray.init() first")
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    path = os.path.abspath(path)
    spill = spill_dir_for(path)
    ctx = ray.get_runtime_context()
    job = ctx.get_job_id()
    config = {"origin_ns": time.time_ns(), "job_id": job, "memory_hz": float(memory_hz),
              "buffer_events": int(buffer_events), "flush_interval": float(flush_interval), "trace_path": path}
    actor_cls = ray.remote(num_cpus=0, max_restarts=0)(Collector)
    collector = actor_cls.options(
        name=collector_name(job), namespace=NAMESPACE, lifetime=None,
        scheduling_strategy=NodeAffinitySchedulingStrategy(ctx.get_node_id(), soft=False),
    ).remote(spill, config)
    ray.get(collector.config.remote())   # fail here, not in the first batch, if it cannot start
    _session.update(path=path, spill=spill, collector=collector, config=config, profile_dir=profile_dir)
    runtime.STATE.looked_up = False
    runtime.attach(collector, config, is_driver=True)
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True
    return spill


def stop(export: bool = True, settle_s: float = 3.0) -> str | None:
    """Flush everything, close the collector and write the trace file. Returns its path."""
    if not _session:
        return None
    import ray
    collector, path, spill = _session["collector"], _session["path"], _session["spill"]
    profile_dir = _session.get("profile_dir")
    try:
        runtime.detach(flush=True)
        # Workers flush on their own timer; wait until their last batches have landed.
        interval = _session["config"]["flush_interval"]
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            last = ray.get(collector.stats.remote(), timeout=10)["last_ingest_ns"]
            if time.time_ns() - last > 3 * interval * 1e9:
                break
            time.sleep(interval)
        ray.get(collector.close.remote(), timeout=30)
        ray.kill(collector)
        _wait_name_released(ray, _session["config"]["job_id"])
    except Exception:
        pass   # the collector may already be gone (Ray shut down); the spill is what counts
    finally:
        _session.clear()
    if not export:
        return spill
    from rldbg.trace.export import export_spill
    export_spill(spill, path, extra=_torch_traces(profile_dir))
    return path


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


def _wait_name_released(ray, job_id: str, timeout: float = 10.0) -> None:
    # ray.kill is asynchronous; a start() right after must not find the name still taken.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get_actor(collector_name(job_id), namespace=NAMESPACE)
        except ValueError:
            return
        time.sleep(0.05)


def collector_handle():
    """The live collector of this session (for the TUI), or None."""
    return _session.get("collector")


def _at_exit() -> None:
    try:
        stop()
    except Exception:
        pass
