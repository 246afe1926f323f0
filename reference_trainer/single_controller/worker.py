"""Worker base: a role's code on one rank. Knows its rank, the group's world size and
master address, and the device it computes on. Several workers (roles) can share one
process; they share that process's torch.distributed default group."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    device: str  # "cpu" or "cuda"
    pool: str


class Worker:
    """Subclass per role; mark remotely callable methods with @register."""

    role: str = "worker"

    def __init__(self, config, info: RankInfo):
        self.config = config
        self.info = info

    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def world_size(self) -> int:
        return self.info.world_size

    @property
    def device(self):
        import torch

        return torch.device("cuda", 0) if self.info.device == "cuda" else torch.device("cpu")


def init_process_group(info: RankInfo, timeout_s: float) -> None:
    """gloo on CPU, nccl on GPU; the rendezvous is rank 0's address."""
    import datetime

    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend = "nccl" if info.device == "cuda" else "gloo"
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{info.master_addr}:{info.master_port}",
        rank=info.rank,
        world_size=info.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
