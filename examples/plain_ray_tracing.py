"""Tracing plain Ray code with rldbg — no trainer involved.

Two "rollout" actors and one "learner" actor; the driver plays the controller, using the same
hooks a trainer's dispatch layer would call. Run:

    python examples/plain_ray_tracing.py /tmp/plain.json.gz
    rldbg report /tmp/plain.json.gz          # or open the file in https://ui.perfetto.dev
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray  # noqa: E402

import rldbg  # noqa: E402
from rldbg import instrument as ri  # noqa: E402


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self, role: str, rank: int, world: int):
        self.role, self.rank = role, rank
        ri.set_worker_identity(role, rank, world)   # publishes role/rank for the CLI; finds the collector
        self.weights = bytearray(1 << 20)
        ri.ledger("params", len(self.weights))

    def work(self, method: str, tag, seconds: float):
        with ri.worker_call(self.role, self.rank, method, tag):
            with rldbg.span("compute", seconds=seconds):
                time.sleep(seconds)
            rldbg.counter("tokens", generated=100 * (self.rank + 1))
            if method == "update":
                with ri.transition("offload_optimizer", frees=("optimizer",)):   # declares what it moves
                    ri.ledger("optimizer", 0)
            return {"rank": self.rank}


def call(group: str, workers: list, method: str, step: int, seconds: float):
    c = ri.call_begin(group, method, "all", len(workers), step)
    refs = [w.work.remote(method, c.tag, seconds) for w in workers]
    ri.call_dispatched(c, [{"rows": 8, "keys": [{"key": "input_ids", "shape": [8, 16], "dtype": "int64",
                                                 "nbytes": 1024}]}] * len(workers))
    out = ray.get(refs)
    ri.call_collected(c, {"rows": len(out)})
    return out


def main(path: str) -> str:
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        with rldbg.trace.tracing(path, memory_hz=20):
            rollout = [Worker.remote("rollout", r, 2) for r in range(2)]
            learner = [Worker.remote("actor", 0, 1)]
            for n in range(3):
                with ri.step(n):
                    call("rollout", rollout, "generate", n, 0.05)
                    with rldbg.span("compute_advantages"):
                        time.sleep(0.01)
                    call("actor", learner, "update", n, 0.03)
    finally:
        ray.shutdown()
    return path


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "plain_ray_trace.json.gz"))
