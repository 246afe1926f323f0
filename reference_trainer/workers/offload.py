"""Moving tensors' storage off the compute device and back while keeping each tensor
object (so parameters stay registered and optimizer state stays keyed by them).

Targets: "host" (GPU → pinned CPU memory), "file" (CPU runs: the group's pages leave the
process for a file, so its memory really drops), "none". A group is a named list of tensors
offloaded and reloaded together (e.g. "optimizer", "actor_params", "rollout_weights").

The file target keeps a group in a shared mapping of a file (FileGroup): the first offload copies
the tensors into it and makes each tensor a view of its part; every later offload only unmaps the
pages from the process (madvise DONTNEED: RSS drops, the bytes stay in the file and the page
cache, which the kernel writes back and may evict like any file's), and a reload maps them again
(MADV_POPULATE_WRITE, in one call). Writing and reading the bytes each step cost the demo's Adam
state (5.3 MB) 3.3 + 5.0 ms a step here; unmapping and mapping cost 0.2 + 2.0 ms."""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import itertools
import mmap
import os
import tempfile
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
    def __init__(self, target: str, directory: str | os.PathLike, device: torch.device,
                 shared: str | os.PathLike | None = None):
        """`shared`: the run's own folder above `directory` that every rank's folder sits in (RUN/offload),
        removed too once empty; a folder the user gave is not."""
        if target not in ("host", "file", "none"):
            raise ValueError(f"offload target {target!r}; accepted: host, file, none")
        self.target, self.device = target, device
        self.directory, self.shared = Path(directory), shared and Path(shared)
        self._groups: dict[str, list[torch.Tensor]] = {}
        self._files: dict[str, FileGroup] = {}

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
            self.give_back_memory()
        elif tensors:
            held = self._files.get(group)
            if held is None or not held.holds(tensors):
                # First offload, or the tensors were given new storage since (a checkpoint load):
                # copy them into a new file once.
                self._files[group] = held = self._new_file(group, tensors)
                self.give_back_memory()   # their old storage was just freed
            held.unmap()
            for t in tensors:
                # A use while offloaded fails loudly instead of quietly mapping the pages back.
                t.data = torch.empty(0, dtype=t.dtype, device=t.device)
        self._groups[group] = tensors
        return moved

    def _new_file(self, group: str, tensors: list[torch.Tensor]) -> FileGroup:
        """The group in a new file. The folders made for it are removed once it is mapped (its file is
        unlinked then: nothing would be left in them). Ranks share RUN/offload: one may remove it just
        as another makes its own folder in it, and that one tries again."""
        for attempt in range(3):
            made = list(itertools.takewhile(lambda d: not d.exists(), (self.directory, *self.directory.parents)))
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                held = FileGroup(self.directory, group, tensors)
            except FileNotFoundError:
                if attempt == 2:
                    raise
                continue
            for d in [*made, *([self.shared] if self.shared else [])]:
                with contextlib.suppress(OSError):   # not empty: another rank's folder is in it
                    d.rmdir()
            return held

    def reload(self, group: str) -> int:
        """Returns the bytes back on the device, counted as each tensor gets them (a count
        afterwards would find the tensors cold)."""
        tensors = self._groups.pop(group, None)
        if tensors is None:
            return 0
        back = 0
        if self.target == "host":
            for t in tensors:
                t.data = t.data.to(self.device, non_blocking=True)
                back += t.nbytes
            torch.cuda.synchronize()
        elif tensors:
            held = self._files[group]
            held.map()
            for t, view in zip(tensors, held.views):
                t.data = view
                back += view.nbytes
        return back

    def give_back_memory(self) -> None:
        """Hand freed memory back to whoever else could use it. On a GPU, torch's caching
        allocator keeps freed blocks reserved for this process: a freed tensor returns nothing to
        the device (rldbg report shows "kept in the allocator's cache") until the cache is
        emptied, as VeRL's sharding managers do after each offload. On the CPU, glibc keeps
        freed heap pages until trimmed."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)   # blocks still used by queued kernels are not free yet
            torch.cuda.empty_cache()
        elif _libc is not None:
            try:
                _libc.malloc_trim(0)
            except AttributeError:
                pass


MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)   # Linux 5.14+; Python 3.11 lacks the name
ALIGN = 64


class FileGroup:
    """A group's tensors as views of one shared mapping of a file in `directory`. The file is
    unlinked as soon as it is mapped: it lives while this process maps it, and a crash leaves
    nothing behind in the offload directory."""

    def __init__(self, directory: Path, group: str, tensors: list[torch.Tensor]):
        offsets, end = [], 0
        for t in tensors:
            end = -(-end // ALIGN) * ALIGN
            offsets.append(end)
            end += t.numel() * t.element_size()
        self.size = max(-(-end // mmap.PAGESIZE) * mmap.PAGESIZE, mmap.PAGESIZE)
        fd, path = tempfile.mkstemp(prefix=f"{group}-", suffix=".bin", dir=directory)
        try:
            os.unlink(path)
            os.ftruncate(fd, self.size)
            self.mm = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        raw = torch.frombuffer(self.mm, dtype=torch.uint8)
        self.views = []
        for t, off in zip(tensors, offsets):
            view = raw[off:off + t.numel() * t.element_size()].view(t.dtype).view(t.shape)
            view.copy_(t.data)
            t.data = view
            self.views.append(view)

    def holds(self, tensors: list[torch.Tensor]) -> bool:
        """Each tensor still has its view as storage (an optimizer step writes in place)."""
        return len(tensors) == len(self.views) and all(
            t.data_ptr() == v.data_ptr() and t.shape == v.shape and t.dtype == v.dtype
            for t, v in zip(tensors, self.views))

    def unmap(self) -> None:
        # For a shared file mapping DONTNEED only drops the process's page-table entries; the
        # bytes stay in the file (MADV_FREE or REMOVE would discard them).
        self.mm.madvise(mmap.MADV_DONTNEED)

    def map(self) -> None:
        try:
            self.mm.madvise(MADV_POPULATE_WRITE)   # one call instead of a page fault per page
        except OSError:
            pass   # an older kernel: the pages come back on first touch instead
