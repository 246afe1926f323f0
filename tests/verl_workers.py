"""VeRL workers for rldbg's VeRL tests: plain VeRL code, no rldbg import. Importable by Ray
workers through PYTHONPATH (tests/conftest.py puts tests/ there)."""
import os
import time

import torch

WORK_S = 0.02   # what every rank spends in a call: real methods take milliseconds or more

from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, dispatch_one_to_all, register
from verl.workers.rollout.base import BaseRollout


class TensorRollout(BaseRollout):
    """A rollout as VeRL's BaseRollout defines one (a user's own, beside vLLM's and SGLang's
    ServerAdapter): resume(tags) brings weights or KV cache back, release() frees both, `mib`
    MiB each, on `device` (host memory on a CPU)."""

    def __init__(self, mib: int, device: str = "cpu"):
        self.mib, self.device, self.held = mib, device, {}

    async def resume(self, tags: list[str]):
        for tag in tags:
            self.held[tag] = torch.ones(self.mib * 2**18, device=self.device)   # float32, touched

    async def update_weights(self, weights, **kwargs):
        for _ in weights:
            pass

    async def release(self):
        self.held.clear()
        if self.device != "cpu":
            torch.cuda.empty_cache()   # as VeRL's sleep does: the device gets the bytes back


def collect_ratio(worker_group, output):
    """A collect of the program's own (a custom dispatch mode): rank 0's total over rank 1's, a
    value none of the ranks returned (0/0 when both totals are 0)."""
    totals = torch.stack([o.batch["total"].sum() for o in output])
    return DataProto.from_dict({"ratio": (totals[0] / totals[1]).reshape(1, 1)})


class ActorWorker(Worker):
    """Doubles a batch; one rank can be made slow through SLOW_RANK / SLOW_METHOD / SLOW_S."""

    def _maybe_slow(self, method):
        if os.environ.get("SLOW_METHOD") == method and int(os.environ.get("SLOW_RANK", "-1")) == self.rank:
            time.sleep(float(os.environ.get("SLOW_S", "0.3")))

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_actor(self, data: DataProto):
        time.sleep(WORK_S)
        self._maybe_slow("update_actor")
        return DataProto.from_dict({"out": data.batch["x"] * 2})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def score(self, data: DataProto):
        """A reward with a bug: the rank data.meta_info["nan_rank"] names scores its first row NaN."""
        out = data.batch["x"].float().mean(dim=-1, keepdim=True)
        if data.meta_info.get("nan_rank") == self.rank:
            out[0, 0] = float("nan")
        return DataProto.from_dict({"scores": out})

    @register(dispatch_mode={"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_ratio})
    def total(self, scale: float):
        return DataProto.from_dict({"total": torch.ones(1, 1) * scale})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def later(self, s: float):
        time.sleep(s)
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def grow(self, mib: int):
        self._keep = getattr(self, "_keep", []) + [torch.ones(mib * 2**18)]   # mib MiB of float32
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def offload_cycle(self):
        """VeRL's own FSDP optimizer offload/load helpers around a real optimizer state (CPU)."""
        from verl.utils.fsdp_utils import load_fsdp_optimizer, offload_fsdp_optimizer

        model = torch.nn.Linear(64, 64)
        opt = torch.optim.Adam(model.parameters())
        model(torch.ones(2, 64)).sum().backward()
        opt.step()
        offload_fsdp_optimizer(opt)
        load_fsdp_optimizer(opt, "cpu")
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def rollout_cycle(self, mib: int, device: str = "cpu"):
        """The hybrid worker's sequence around a weight sync (VeRL's update_weights): wake the
        weights, then the KV cache, then the rollout goes back to sleep."""
        import asyncio

        rollout = TensorRollout(mib, device)

        async def cycle():
            await rollout.resume(tags=["weights"])
            await rollout.resume(["kv_cache"])
            await rollout.release()

        asyncio.run(cycle())
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail(self):
        raise ValueError(f"rank {self.rank} refuses")


class CriticWorker(Worker):
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_values(self, data: DataProto):
        time.sleep(WORK_S)
        return DataProto.from_dict({"values": data.batch["x"].float().mean(dim=-1, keepdim=True)})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return self.rank


class AsyncWorker(Worker):
    """An async registered method makes VeRL's worker an async Ray actor."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    async def ping(self, x: int):
        import asyncio

        await asyncio.sleep(0.01)
        return x + self.rank
