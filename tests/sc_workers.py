"""Toy workers for the single-controller tests (a module of its own so Ray workers import it)."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from reference_trainer.protocol import DataProto
from reference_trainer.single_controller import Dispatch, Worker, register, register_dispatch_mode


def _halves(world, args, kwargs):
    (value,) = args
    return [((value / world,), {}) for _ in range(world)], None


def _sum(outputs, state):
    return sum(outputs)


SPLIT_SUM = register_dispatch_mode("SPLIT_SUM", _halves, _sum)


class EchoWorker(Worker):
    role = "echo"

    def __init__(self, config, info):
        super().__init__(config, info)
        self.calls = 0

    @register(Dispatch.ONE_TO_ALL)
    def whoami(self):
        return {"rank": self.rank, "world": self.world_size, "pid": os.getpid(),
                "master": (self.info.master_addr, self.info.master_port)}

    @register(Dispatch.ALL_TO_ALL)
    def square(self, x):
        return x * x

    @register(Dispatch.DP_COMPUTE)
    def add_rank(self, x):
        return x + self.rank

    @register(Dispatch.DP_COMPUTE_PROTO)
    def double(self, batch: DataProto) -> DataProto:
        self.calls += 1
        out = DataProto.from_dict(tensors={"y": batch.tensors["x"] * 2,
                                           "valid": batch.valid_mask().long(),
                                           "rank": torch.full((len(batch),), self.rank)})
        out.add_metrics({"rows_seen": float(len(batch))})
        return out

    @register(Dispatch.DP_COMPUTE_PROTO)
    def tag_rows(self, batch: DataProto, grow: int = 0) -> DataProto:
        """The batch back with its rank per row and `grow` bytes per row of new column."""
        batch.tensors["rank"] = torch.full((len(batch),), self.rank)
        if grow:
            batch.tensors["grown"] = (torch.arange(len(batch) * grow) % 251).to(torch.uint8).view(len(batch), grow)
        batch.add_metrics({"rows_seen": float(len(batch))})
        return batch

    @register(Dispatch.ONE_TO_ALL)
    def checksum(self, batch: DataProto, fail_rank: int = -1):
        if self.rank == fail_rank:
            raise ValueError(f"bad batch on rank {self.rank}")
        return {k: float(t.double().sum()) for k, t in batch.tensors.items()}

    @register(Dispatch.RANK_ZERO)
    def count_calls(self):
        return self.calls

    @register(Dispatch.ONE_TO_ALL)
    def calls_per_rank(self):
        return self.calls

    @register(Dispatch.ONE_TO_ALL, blocking=False)
    def slow_sum(self, n):
        return sum(range(n))

    @register(Dispatch.ONE_TO_ALL)
    def all_reduce(self, value):
        t = torch.tensor([float(value)])
        dist.all_reduce(t)
        return float(t)

    @register(SPLIT_SUM)
    def identity(self, x):
        return x

    @register(Dispatch.ONE_TO_ALL)
    def fail_on(self, rank):
        if self.rank == rank:
            raise ValueError(f"boom on rank {rank}")
        return "ok"


class OtherWorker(Worker):
    role = "other"

    @register(Dispatch.ONE_TO_ALL)
    def whoami(self):
        return {"rank": self.rank, "pid": os.getpid()}
