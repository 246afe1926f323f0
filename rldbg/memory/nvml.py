"""What the GPU itself says, through NVML (nvidia-ml-py): memory used on each GPU this process
computes on, and by which process.

The caching allocator's counters say what torch holds; only the device says what the GPU has
left, and only NVML says who holds it: a rollout server or scheduler in another process, a
stranger on the GPU, this process's CUDA context. Every call here is meant for a background
thread (the memory sampler) or a transition's edges, never for every worker call.

NVML is optional: without the library, without a driver, or on a CPU-only process, `gpus()` is
empty and every probe returns nothing.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from dataclasses import dataclass

_lock = threading.Lock()
_state: dict = {"nvml": None, "pid": None, "gpus": None}   # nvml: module, or False when unavailable


def _nvml():
    """The initialised pynvml module of this process, or None. Re-initialised after a fork."""
    pid = os.getpid()
    if _state["pid"] == pid:
        return _state["nvml"] or None
    with _lock:
        if _state["pid"] != pid:
            try:
                import pynvml   # nvidia-ml-py

                pynvml.nvmlInit()
                mod = pynvml
            except Exception:   # no library, no driver, no GPU: NVML has nothing to say here
                mod = False
            _state.update(nvml=mod, pid=pid, gpus=None)
    return _state["nvml"] or None


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU this process uses: its NVML handle, index on the machine and UUID."""
    handle: object
    index: int
    uuid: str

    @property
    def label(self) -> str:
        """"gpu3": the machine's index, as nvidia-smi numbers it (not the CUDA_VISIBLE_DEVICES one)."""
        return f"gpu{self.index}"


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _torch_uuid() -> str | None:
    """The UUID of the GPU torch computes on in this process, when torch already runs CUDA."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
    except Exception:
        return None
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def gpus() -> list[Gpu]:
    """The GPUs this process computes on: the one torch uses, else those CUDA_VISIBLE_DEVICES
    names (Ray sets it per worker), else none. Cached once torch's device is known."""
    nv = _nvml()
    if nv is None:
        return []
    if (cached := _state["gpus"]) is not None:
        return cached
    try:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        found = [Gpu(h, i, _text(nv.nvmlDeviceGetUUID(h))) for i, h in enumerate(handles)]
    except Exception:
        return []
    if (uuid := _torch_uuid()) is not None:
        mine = [g for g in found if g.uuid == uuid]
        _state["gpus"] = mine   # torch's device does not change under a running process
        return mine
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return []   # not decided yet (torch not started on CUDA), or no GPU: ask again later
    items = [item.strip() for item in visible.split(",")]
    return [g for item in items for g in found
            if item == str(g.index) or (item.startswith("GPU-") and g.uuid.startswith(item))]


def processes(gpu: Gpu) -> dict[int, int]:
    """{pid: bytes} of every process NVML sees using the GPU (compute and graphics contexts).
    A process whose usage NVML does not report (some containers) is listed with 0."""
    nv = _nvml()
    out: dict[int, int] = {}
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        with contextlib.suppress(Exception):
            for p in getattr(nv, fn)(gpu.handle):
                used = p.usedGpuMemory
                out[int(p.pid)] = out.get(int(p.pid), 0) + (int(used) if isinstance(used, int) else 0)
    return out


def by_process() -> list[tuple[Gpu, int, int, dict]]:
    """[(gpu, used, total, {pid: bytes})] for each GPU this process uses: the per-GPU picture the
    memory sampler records (a series per process); used and total count every process together."""
    out = []
    for g in gpus():
        try:
            info = _nvml().nvmlDeviceGetMemoryInfo(g.handle)
        except Exception:
            continue   # NVML cannot say for this GPU
        out.append((g, int(info.used), int(info.total), processes(g)))
    return out
