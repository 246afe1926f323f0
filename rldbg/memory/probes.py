"""Memory probes: what this process holds right now.

CPU: resident set size from /proc/self/statm (one small read, no psutil).
CUDA (only when torch is already imported and a device is present): the caching allocator's
allocated/reserved bytes.

Two depths, because the edges of every worker call are on the training thread:
  sample()       rss and the allocator's two counters (one call into torch's allocator, no
                 driver call): cheap enough for every call's edges.
  sample_full()  that, plus what the device says: the whole GPU's used bytes (cudaMemGetInfo).
                 It stays truthful when an engine (vLLM's sleep mode) frees memory behind the
                 allocator's back, and it is the only figure that shows what the allocator keeps
                 cached. Taken at a transition's edges and by the background sampler, which adds
                 each process's own bytes through NVML (rldbg.memory.sampler).
"""
from __future__ import annotations

import os
import sys

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_cuda = None   # None: not checked yet; False: no CUDA; else the torch.cuda module
_statm = {"fd": None, "pid": None}


def rss_bytes() -> int:
    # A kept-open descriptor read with pread costs a few µs instead of an open/read/close;
    # reopened after fork (Ray workers are forked from a shared parent).
    try:
        pid = os.getpid()
        if _statm["pid"] != pid:
            _statm["fd"], _statm["pid"] = os.open("/proc/self/statm", os.O_RDONLY), pid
        return int(os.pread(_statm["fd"], 128, 0).split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _cuda_module():
    global _cuda
    if _cuda is None:
        # Never import torch just to look: a process without torch has no CUDA tensors of ours.
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        try:
            _cuda = torch.cuda if torch.cuda.is_available() else False
        except Exception:
            _cuda = False
    return _cuda or None


def sample() -> dict:
    """{series: bytes}: rss always; cuda_allocated, cuda_reserved with CUDA. No driver call."""
    out = {"rss": rss_bytes()}
    cuda = _cuda_module()
    try:
        if cuda is not None and cuda.is_initialized():
            # memory_allocated()/memory_reserved() each flatten and sort the allocator's whole
            # statistics dict; the nested form is one call for both counters.
            stats = cuda.memory.memory_stats_as_nested_dict(cuda.current_device())
            out["cuda_allocated"] = stats["allocated_bytes"]["all"]["current"]
            out["cuda_reserved"] = stats["reserved_bytes"]["all"]["current"]
    except Exception:
        pass
    return out


def sample_full() -> dict:
    """sample() plus, with CUDA, device_used: the whole GPU's used bytes, every process together
    (one cudaMemGetInfo). The whole GPU, not this process: a rollout server in another process
    that a transition puts to sleep returns its memory there too."""
    out = sample()
    if "cuda_allocated" not in out:
        return out
    cuda = _cuda_module()
    try:
        free, total = cuda.mem_get_info(cuda.current_device())
        out["device_used"] = total - free
    except Exception:
        pass
    return out
