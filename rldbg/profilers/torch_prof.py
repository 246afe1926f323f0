"""torch.profiler around selected worker calls, written where TensorBoard's plugin reads it.

    with profile_call(role, rank, method, step):   # inside instrument.worker_call
        ...the registered method...

Layout: <dir>/<run>/<method>/<role>_rank<N>.<step:06d>.pt.trace.json
torch-tb-profiler 0.4.3 names a worker by the file name up to an optional ".<digits>" span
before ".pt.trace.json" (consts.WORKER_PATTERN), and a run by its directory. So one directory
per method makes each run one method, its workers "actor_rank0", "actor_rank1", ..., and its
spans the steps; the plugin's Distributed view then compares ranks of the same call and step.
Spans sort as strings, hence the zero padding; a second call of the method in the same step
gets two more digits ("00000301"), which still sorts between its neighbours.

The trace also carries an "rldbg" metadata entry (role, rank, step, method and the unix-ns
times around a record_function("rldbg:<method>") annotation) so merge.py can put the operators
on rldbg's clock inside the call span without trusting torch's clock.
"""
from __future__ import annotations

import contextlib
import json
import os
import time

from rldbg.extras import need
from rldbg.profilers.spec import from_env

ANNOTATION_PREFIX = "rldbg:"
META_KEY = "rldbg"


def profile_call(role: str, rank: int, method: str, step):
    """A context manager: torch.profiler around the call when RLDBG_PROFILE selects it, else a
    no-op costing one env lookup and a few comparisons."""
    spec = from_env()
    if spec is None or not spec.selects(role, rank, method, step):
        return contextlib.nullcontext()
    need("torch", f"profiling {role}.{method} (RLDBG_PROFILE selects it)", "torch")
    return _profiled(spec, role, rank, method, step)


def trace_path(dir: str, run: str, role: str, rank: int, method: str, step) -> str:
    """A free path for this call's trace (see the module docstring for the layout)."""
    base = os.path.join(dir, run, method, f"{role}_rank{rank}.{int(step or 0):06d}")
    path, n = f"{base}.pt.trace.json", 1
    while os.path.exists(path):
        path, n = f"{base}{n:02d}.pt.trace.json", n + 1
    return path


@contextlib.contextmanager
def _profiled(spec, role: str, rank: int, method: str, step):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    meta = {"role": role, "rank": rank, "step": step, "method": method, "pid": os.getpid(),
            "annotation": f"{ANNOTATION_PREFIX}{method}"}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    prof = profile(activities=activities, record_shapes=True, with_stack=False, profile_memory=True)
    try:
        with prof:
            meta["t0_ns"] = time.time_ns()
            try:
                with record_function(meta["annotation"]):
                    yield
            finally:
                meta["t1_ns"] = time.time_ns()
                prof.add_metadata_json(META_KEY, json.dumps(meta))
    finally:
        # Export even when the call raised: the profile of a failing call is worth keeping. Under a
        # name the plugin ignores, then renamed: TensorBoard may scan at any moment and chokes on a
        # half-written trace.
        path = trace_path(spec.dir, spec.run, role, rank, method, step)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        prof.export_chrome_trace(path + ".tmp")
        os.replace(path + ".tmp", path)
