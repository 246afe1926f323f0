"""Opt-in CUDA memory snapshots around hybrid-engine transitions (offload, onload, sleep, wake...).

    RLDBG_CUDA_MEMORY_SNAPSHOT=/path        # in the workers' environment
    with snapshot_transition("optimizer_to_host", role, rank): ...

The first transition in a process starts torch's allocator history
(torch.cuda.memory._record_memory_history); after each transition the snapshot, which holds
every allocation and free since then with its stack, goes to
<dir>/<role>_rank<N>/<step:06d>.<seq:03d>.<name>.pickle — open it at
https://pytorch.org/memory_viz (drag the file in; it stays in the browser). Without CUDA this is
a no-op that says so once per process. Off (unset) it costs one env lookup.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import re
import sys

from rldbg.context import current
from rldbg.switches import CUDA_MEMORY_SNAPSHOT as ENV

MAX_ENTRIES = 100_000   # allocator events kept; bounds host memory of the history
_state = {"recording": False, "noticed": False}
_seq = itertools.count()
_SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def snapshot_transition(name: str, role: str | None = None, rank: int | None = None):
    """Context manager; see the module docstring. role/rank default to the current context."""
    out_dir = os.environ.get(ENV)
    if not out_dir:
        return contextlib.nullcontext()
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        if not _state["noticed"]:
            _state["noticed"] = True
            print(f"rldbg: {ENV} is set but CUDA is not available in pid {os.getpid()}; "
                  "no memory snapshots are taken", file=sys.stderr)
        return contextlib.nullcontext()
    return _snapshot(out_dir, name, role, rank)


@contextlib.contextmanager
def _snapshot(out_dir: str, name: str, role, rank):
    import torch

    ctx = current()
    role = role if role is not None else ctx.role
    rank = rank if rank is not None else ctx.rank
    if not _state["recording"]:
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
        _state["recording"] = True
    try:
        yield
    finally:
        path = os.path.join(out_dir, f"{_SAFE.sub('_', role)}_rank{rank}",
                            f"{int(ctx.step or 0):06d}.{next(_seq):03d}.{_SAFE.sub('_', name)}.pickle")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            torch.cuda.memory._dump_snapshot(path)
        except Exception as e:   # never let a diagnostic break the transition it observes
            print(f"rldbg: CUDA memory snapshot {path} failed: {type(e).__name__}: {e}", file=sys.stderr)
