"""Worker base: a role's code on one rank. Knows its rank, the group's world size and
master address, and the device it computes on. Several workers (roles) can share one
process; they share that process's torch.distributed default group."""
from __future__ import annotations

import functools
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

    @functools.cached_property
    def device(self):
        """Built once: every method asks for it, a traced run's ledger at every transition."""
        import torch

        return torch.device("cuda", 0) if self.info.device == "cuda" else torch.device("cpu")


def rendezvous_listener(node_ip: str):
    """Rank 0's rendezvous socket, bound to the node's cluster address only (127.0.0.1 on a
    single-node run). torch's TCPStore would otherwise listen on every interface (*:PORT)."""
    import socket

    family = socket.AF_INET6 if ":" in node_ip else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((node_ip, 0))
    s.listen(128)
    return s


def init_process_group(info: RankInfo, timeout_s: float, listener=None) -> None:
    """gloo on CPU, nccl on GPU; the rendezvous store is served by rank 0 from `listener`
    (see rendezvous_listener), so nothing of ours listens beyond the cluster's addresses."""
    import datetime
    import ipaddress
    import os

    import torch.distributed as dist

    if dist.is_initialized():
        return
    if ipaddress.ip_address(info.master_addr).is_loopback:
        # The collectives' own sockets follow the hostname's address unless told: keep them on lo too.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    timeout = datetime.timedelta(seconds=timeout_s)
    is_master = info.rank == 0 and listener is not None
    store = dist.TCPStore(info.master_addr, info.master_port, info.world_size, is_master, timeout,
                          wait_for_workers=False, master_listen_fd=listener.fileno() if is_master else None)
    backend = "nccl" if info.device == "cuda" else "gloo"
    dist.init_process_group(backend=backend, store=store, rank=info.rank, world_size=info.world_size,
                            timeout=timeout)
