"""A driver for test_trace_two_nodes: `python two_node_driver.py TRACE [WINDOW]` against RAY_ADDRESS
(a tests/cluster_host.py cluster with resources "head" and "worker1"): rank 0 on the head, rank 1 on
the other node, three traced calls; prints the ranks' {rank: [pid, node_id]} as one JSON line.
With WINDOW: the flight recorder instead (trace.window=WINDOW), twelve steps of a call each, then a
dump asked for (rldbg.trace.dump), whose status is printed as one JSON line before the ranks'."""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import ray

import rldbg.trace
from rldbg import instrument as ri


@ray.remote(num_cpus=0)
class Ranked:
    def __init__(self, rank):
        self.rank = rank
        ri.set_worker_identity("actor", rank, 2)

    def where(self):
        return os.getpid(), ray.get_runtime_context().get_node_id()

    def work(self, tag):
        with ri.worker_call("actor", self.rank, "work", tag):
            time.sleep(0.01)
        return self.rank


def main(path: str) -> None:
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    ws = [Ranked.options(resources={"head": 0.01}).remote(0), Ranked.options(resources={"worker1": 0.01}).remote(1)]
    where = ray.get([w.where.remote() for w in ws])
    window = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    with rldbg.trace.tracing(path, memory_hz=0, flush_interval=0.1, window=window):
        for n in range(12 if window else 3):
            with ri.step(n + 1) if window else contextlib.nullcontext():
                c = ri.call_begin("actor", "work", "all", 2, n + 1 if window else n)
                refs = [w.work.remote(c.tag) for w in ws]
                ri.call_dispatched(c)
                ri.call_collected(c, ray.get(refs))
        if window:
            print(json.dumps(rldbg.trace.dump("manual", wait_s=60)), flush=True)
    print(json.dumps({r: w for r, w in enumerate(where)}), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
