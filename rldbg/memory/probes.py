"""Memory probes: what this process holds right now.

CPU: resident set size from /proc/self/statm (one small read, no psutil).
CUDA (only when torch is already imported and a device is present): the caching allocator's
allocated/reserved bytes, and device-wide used = total - free from cudaMemGetInfo, which stays
truthful when an engine (vLLM sleep mode) frees memory behind the allocator's back.
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
    """{series: bytes}: rss always; cuda_allocated, cuda_reserved, device_used with CUDA."""
    out = {"rss": rss_bytes()}
    cuda = _cuda_module()
    if cuda is not None:
        try:
            dev = cuda.current_device()
            out["cuda_allocated"] = cuda.memory_allocated(dev)
            out["cuda_reserved"] = cuda.memory_reserved(dev)
            free, total = cuda.mem_get_info(dev)
            out["device_used"] = total - free
        except Exception:
            pass
    return out
