"""Moving tensors' storage off the compute device and back while keeping each tensor
object (so parameters stay registered and optimizer state stays keyed by them).

Targets: "host" (GPU → pinned CPU memory), "file" (CPU runs: write to disk and free, so the
process's memory really drops), "none". A group is a named list of tensors offloaded and
reloaded together (e.g. "optimizer", "actor_params", "rollout_weights")."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

import torch

_libc = None


def tune_allocator_for_offload() -> None:
    """glibc raises its mmap threshold after large frees, after which freed tensors stay in the
    heap and RSS never drops. Pinning the threshold keeps big tensors in mmap'd chunks that
    go back to the OS on free, so an offload shows up as a real drop."""
    global _libc
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        _libc = ctypes.CDLL(name)
        _libc.mallopt(-3, 256 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        _libc = None


def resolve_target(target: str, device: str) -> str:
    if target == "auto":
        return "host" if device == "cuda" else "file"
    if target == "host" and device != "cuda":
        raise ValueError("offload.target=host moves GPU memory to the host; on a CPU run use offload.target=file or none")
    return target


class Offloader:
    def __init__(self, target: str, directory: str | os.PathLike, device: torch.device):
        if target not in ("host", "file", "none"):
            raise ValueError(f"offload target {target!r}; accepted: host, file, none")
        self.target, self.device = target, device
        self.directory = Path(directory)
        self._groups: dict[str, list[torch.Tensor]] = {}
        self._shapes: dict[str, list] = {}

    def is_offloaded(self, group: str) -> bool:
        return group in self._groups

    def offload(self, group: str, tensors: list[torch.Tensor]) -> int:
        """Returns the bytes moved off the device (0 for target none or an empty group)."""
        if self.target == "none" or group in self._groups:
            return 0
        tensors = [t for t in tensors if t.numel() > 0]
        moved = sum(t.numel() * t.element_size() for t in tensors)
        if self.target == "host":
            for t in tensors:
                host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
                host.copy_(t.data, non_blocking=True)
                t.data = host
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        else:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Raw bytes, one file per group: torch.save's pickling, zip records and CRCs made
            # a save/load pair of the demo's Adam state ~35 ms a step; a plain write is ~3 ms.
            shapes = []
            with open(self._path(group), "wb", buffering=0) as f:
                for t in tensors:
                    shapes.append(t.shape)
                    f.write(_raw(t.data))
                    t.data = torch.empty(0, dtype=t.dtype, device=t.device)
            self._shapes[group] = shapes
            self.give_back_memory()
        self._groups[group] = tensors
        return moved

    def reload(self, group: str) -> int:
        tensors = self._groups.pop(group, None)
        if tensors is None:
            return 0
        if self.target == "host":
            for t in tensors:
                t.data = t.data.to(self.device, non_blocking=True)
            torch.cuda.synchronize()
        else:
            path = self._path(group)
            with open(path, "rb", buffering=0) as f:
                for t, shape in zip(tensors, self._shapes.pop(group)):
                    data = torch.empty(shape, dtype=t.dtype, device=t.device)
                    view = _raw(data)
                    if f.readinto(view) != len(view):
                        raise OSError(f"offload file {path} is shorter than the {group!r} tensors it held")
                    t.data = data
            path.unlink()
        return sum(t.numel() * t.element_size() for t in tensors)

    def give_back_memory(self) -> None:
        if _libc is not None:
            try:
                _libc.malloc_trim(0)
            except AttributeError:
                pass

    def _path(self, group: str) -> Path:
        return self.directory / f"{group}.bin"


def _raw(t: torch.Tensor) -> memoryview:
    """The tensor's bytes, without a copy (CPU, contiguous; any dtype, bfloat16 included)."""
    return memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy())
