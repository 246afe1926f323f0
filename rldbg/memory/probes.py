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
import time

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_reads = None   # None: not known yet; False: no CUDA here; else _allocator()'s reads
# This process's own: /proc/self/statm kept open (a pread costs a few µs, an open/read/close more),
# and its newest sample, the hooks' or the sampler's, as (time.monotonic_ns(), sample).
_own = {"fd": None, "last": (0, None)}
# A transition opening this soon after a sample takes it where a sample is RSS alone: adjacent edges
# (a transition's end, the next one's start) are ~30 µs apart, and RSS moves a few hundred KB at most.
OPENING_REUSE_NS = 60_000


def rss_bytes() -> int:
    try:
        if (fd := _own["fd"]) is None:
            fd = _own["fd"] = os.open("/proc/self/statm", os.O_RDONLY)
        return int(os.pread(fd, 128, 0).split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


# A forked child's descriptor and last sample are its parent's: dropped at the fork (not found by an
# os.getpid() at every read, a system call as costly as the read). No fork (Windows): no hook.
getattr(os, "register_at_fork", lambda **_: None)(after_in_child=lambda: _own.update(fd=None, last=(0, None)))


def _allocator():
    """(device index, allocator stats, free and total bytes) readers once CUDA is initialised here,
    else None: torch's bindings, not the public wrappers whose checks cost µs at each call's edge."""
    global _reads
    if _reads is None and (torch := sys.modules.get("torch")) is not None:   # never import it to look
        try:
            if torch.cuda.is_initialized():
                C, cuda = torch._C, torch.cuda
                _reads = (getattr(C, "_cuda_getDevice", cuda.current_device),
                          getattr(C, "_cuda_memoryStats", cuda.memory.memory_stats_as_nested_dict),
                          cuda.mem_get_info)
            elif not torch.cuda.is_available():
                _reads = False
        except Exception:
            _reads = False
    return _reads or None


def sample(full: bool = False) -> dict:
    """{series: bytes}: rss always; cuda_allocated, cuda_reserved with CUDA (no driver call); with
    `full`, see sample_full."""
    out = {"rss": rss_bytes()}
    if (reads := _allocator()) is not None:
        try:
            # memory_allocated()/memory_reserved() each flatten and sort the allocator's whole
            # statistics dict; the nested form is one call for both counters.
            stats = reads[1](device := reads[0]())
            out["cuda_allocated"] = stats["allocated_bytes"]["all"]["current"]
            out["cuda_reserved"] = stats["reserved_bytes"]["all"]["current"]
            if full:
                free, total = reads[2](device)
                out["device_used"] = total - free
        except Exception:
            pass
    _own["last"] = (time.monotonic_ns(), out)
    return out


def opening() -> tuple:
    """A transition's opening sample and whether it is new (a point to record): the last one where
    OPENING_REUSE_NS allows, else sample_full(). Never at a span's end: what it freed shows there; nor
    at a call's start: `rldbg top` tells a running call by the sample its start records."""
    t, last = _own["last"]
    if time.monotonic_ns() - t < OPENING_REUSE_NS and _allocator() is None:
        return last, False
    return sample(True), True


def sample_full() -> dict:
    """sample() plus, with CUDA, device_used: the whole GPU's used bytes, every process together
    (one cudaMemGetInfo). The whole GPU, not this process: a rollout server in another process
    that a transition puts to sleep returns its memory there too."""
    return sample(True)
