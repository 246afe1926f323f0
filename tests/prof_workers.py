"""Ray actors for the profiler tests: a tiny torch trainer rank and a rank that hangs on purpose.

They name themselves like the reference trainer's hosts (repr "<roles>[rank r/w]", actor name
"<run>:<roles>:rank<N>") without importing it, so rldbg finds them the same way."""
from __future__ import annotations

import os
import queue
import time


class TinyRank:
    """One rank of role `role`: forward/backward of a small MLP under rldbg's profile_call."""

    def __init__(self, role: str, rank: int, world: int, profile_env: str | None = None):
        import torch

        torch.set_num_threads(1)
        self.role, self.rank, self.world = role, rank, world
        if profile_env is not None:
            os.environ["RLDBG_PROFILE"] = profile_env
        torch.manual_seed(rank)
        self.model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def __repr__(self) -> str:
        return f"{self.role}[rank {self.rank}/{self.world}]"

    def update(self, step: int) -> float:
        from rldbg.profilers.torch_prof import profile_call

        with profile_call(self.role, self.rank, "update_actor", step):
            return self._train_step()

    def _train_step(self) -> float:
        import torch

        x = torch.randn(16, 32)
        loss = self.model(x).pow(2).mean()
        loss.backward()
        return float(loss)

    def pid(self) -> int:
        return os.getpid()


class HangRank:
    """Rank `hang_rank` blocks in wait_for_peer (a queue nobody fills); the others return."""

    def __init__(self, role: str, rank: int, world: int):
        self.role, self.rank, self.world = role, rank, world
        self._q: queue.Queue = queue.Queue()

    def __repr__(self) -> str:
        return f"{self.role}[rank {self.rank}/{self.world}]"

    def pid(self) -> int:
        return os.getpid()

    def step(self, hang_rank: int, seconds: float) -> int:
        if self.rank == hang_rank:
            return wait_for_peer(self._q, seconds)
        return self.rank

    def spin(self, seconds: float) -> int:
        """Busy Python work for the flame recording."""
        end, n = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            n += busy_loop(2000)
        return n

    def spin_then_exit(self, seconds: float) -> None:
        """A worker that ends mid-recording (a crash, the run's end)."""
        self.spin(seconds)
        os._exit(0)


def wait_for_peer(q: queue.Queue, seconds: float) -> int:
    try:
        return q.get(timeout=seconds)
    except queue.Empty:
        return -1


def busy_loop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


class CollectiveRank:
    """A critic rank in a gloo group: `hang_rank` enters all_reduce, the others wait on an event
    inside update_critic, so the collective never completes (the classic mismatched-call hang)."""

    def __init__(self, role: str, rank: int, world: int, port: int):
        import datetime

        import torch.distributed as dist

        self.role, self.rank, self.world, self.port = role, rank, world, port
        self._release = None
        self._dist, self._timeout = dist, datetime.timedelta(seconds=120)

    def __repr__(self) -> str:
        return f"{self.role}[rank {self.rank}/{self.world}]"

    def join(self) -> int:
        self._dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{self.port}", rank=self.rank,
                                      world_size=self.world, timeout=self._timeout)
        return self.rank

    def update_critic(self, hang_rank: int, seconds: float) -> int:
        import threading

        import torch

        if self.rank == hang_rank:
            t = torch.ones(4)
            self._dist.all_reduce(t)          # waits for peers that never come
            return int(t.sum())
        self._release = threading.Event()
        self._release.wait(seconds)           # this rank is the odd one out: not in the collective
        return -1
