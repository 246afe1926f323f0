"""Holds a real multi-node Ray cluster on loopback for tests that need one beside the session's
cluster: `python tests/cluster_host.py NODES` starts a head (dashboard + job agent, profiling
routes on) and NODES-1 worker nodes with 1 CPU each, prints one JSON line
{"address", "dashboard", "nodes": [{"node_id", "head"}]}, and shuts everything down when its stdin
closes (so a dying test run cannot leave a cluster behind).

Every port is chosen free: several clusters on one machine (the test session's, a user's) must not
meet on Ray's default ports (the dashboard agent's 52365 most of all: job submission fails with
"No available agent" when another cluster holds it).
"""
from __future__ import annotations

import json
import os
import socket
import sys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_DASHBOARD_ENABLE_PROFILING"] = "1"   # /worker/traceback for rldbg stack on any node
    from ray.cluster_utils import Cluster

    dash = free_port()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": "127.0.0.1", "dashboard_host": "127.0.0.1",
        "include_dashboard": True, "dashboard_port": dash, "dashboard_agent_listen_port": free_port(),
        "metrics_export_port": free_port(), "resources": {"head": 1}})
    for i in range(1, n):
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", dashboard_agent_listen_port=free_port(),
                         metrics_export_port=free_port(), resources={f"worker{i}": 1})
    cluster.wait_for_nodes()
    nodes = [{"node_id": node.node_id, "head": node is cluster.head_node}
             for node in [cluster.head_node, *cluster.worker_nodes]]
    print(json.dumps({"address": cluster.address, "dashboard": f"http://127.0.0.1:{dash}", "nodes": nodes}),
          flush=True)
    try:
        sys.stdin.read()   # until the test closes our stdin (or dies)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
