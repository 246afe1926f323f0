"""A driver for tests/test_cluster_debug.py: `python two_node_debug_driver.py` against RAY_ADDRESS (a
tests/cluster_host.py cluster with resources "head" and "worker1"): actor rank 0 on the head, rank 1
on the other node, both in debug mode (listening); prints their {rank: [pid, node_id]} as one JSON
line, then keeps them busy (traced calls, with the control hub up) until its stdin closes."""
from __future__ import annotations

import json
import os
import sys
import threading

import ray

import rldbg.control
import rldbg.trace
from node_workers import Looper


def main() -> None:
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    env = {"env_vars": {"RLDBG_LISTEN_ROLES": "actor"}}
    ws = [Looper.options(resources={"head": 0.01}, runtime_env=env).remote(0, 2),
          Looper.options(resources={"worker1": 0.01}, runtime_env=env).remote(1, 2)]
    where = ray.get([w.where.remote() for w in ws])
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    rldbg.control.start()
    with rldbg.trace.tracing(os.environ.get("TRACE", "trace.json"), memory_hz=0, flush_interval=0.2):
        print(json.dumps({r: w for r, w in enumerate(where)}), flush=True)
        # Each rank is kept busy on its own: a rank paused at a breakpoint must not idle the other.
        pending = {w.spin.remote(10): i for i, w in enumerate(ws)}
        while not done.is_set():
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                i = pending.pop(ref)
                ray.get(ref)
                pending[ws[i].spin.remote(10)] = i
    rldbg.control.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
