"""A ranked actor for the multi-node debugging tests (tests/two_node_debug_driver.py): it sets its
rldbg identity (and so, in debug mode, listens for a debugger) and loops in small ticks, so a
stack dump, a breakpoint by file and line, or an evaluation always has somewhere to land."""
from __future__ import annotations

import os
import time

import ray

from rldbg import instrument as ri


@ray.remote(num_cpus=0)
class Looper:
    def __init__(self, rank: int, world: int):
        self.rank = rank
        ri.set_worker_identity("actor", rank, world)   # RLDBG_LISTEN_ROLES=actor: opens the listener

    def where(self):
        return os.getpid(), ray.get_runtime_context().get_node_id()

    def spin(self, ticks: int) -> int:
        total = 0
        for i in range(ticks):
            total += self.tick(i)
        return total

    def tick(self, i: int) -> int:
        time.sleep(0.02)
        return i   # TICK: the tests' breakpoint line
