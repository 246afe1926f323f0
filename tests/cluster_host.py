"""Holds a real multi-node Ray cluster on loopback for tests that need one beside the session's
cluster: `python tests/cluster_host.py NODES [--no-profiling] [--fast-node-death]` starts a head (dashboard
+ job agent, profiling routes on unless --no-profiling) and NODES-1 worker nodes with 1 CPU each, prints one JSON
line {"address", "dashboard", "nodes": [{"node_id", "head"}]}, and shuts everything down when its
stdin closes (so a dying test run cannot leave a cluster behind).

While it runs, a line `kill NODE_ID` on its stdin kills that node the hard way (its raylet and
every process of the node SIGKILLed, as when a machine is lost) and answers {"killed": NODE_ID}.

Every port is chosen free: several clusters on one machine (the test session's, a user's) must not
meet on Ray's default ports (the dashboard agent's 52365 most of all: job submission fails with
"No available agent" when another cluster holds it).
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_agents(dashboard: str, node_ids: list[str], timeout: float = 60.0) -> None:
    """Until the head's dashboard finds every node's agent. wait_for_nodes() waits for the raylets;
    an agent registers its address in the GCS a moment later, and until then /worker/traceback for
    that node answers 500 "Failed to get agent address" (a pid nobody holds: any other answer will do)."""
    deadline = time.monotonic() + timeout
    for node_id in node_ids:
        while True:
            try:
                urllib.request.urlopen(f"{dashboard}/worker/traceback?pid=4194303&node_id={node_id}", timeout=10)
                break
            except urllib.error.HTTPError as e:
                if "agent address" not in e.read().decode("utf-8", "replace"):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the agent of node {node_id} did not register in {timeout:.0f} s")
            time.sleep(0.2)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 2
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # As from an activated venv: each node's agent looks py-spy up on the PATH Ray was started with.
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    if "--no-profiling" in sys.argv:
        os.environ.pop("RAY_DASHBOARD_ENABLE_PROFILING", None)
    else:
        os.environ["RAY_DASHBOARD_ENABLE_PROFILING"] = "1"   # /worker/traceback for rldbg stack on any node
    from ray.cluster_utils import Cluster

    dash = free_port()
    # --fast-node-death: the GCS gives up on a silent node after 3 missed 1 s health checks instead of
    # Ray's 5 x 3 s, so a test that kills a node does not wait a quarter of a minute for Ray's verdict.
    fast = {"_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}} \
        if "--fast-node-death" in sys.argv else {}
    cluster = Cluster(initialize_head=True, head_node_args={**fast,
        "num_cpus": 1, "node_ip_address": "127.0.0.1", "dashboard_host": "127.0.0.1",
        "include_dashboard": True, "dashboard_port": dash, "dashboard_agent_listen_port": free_port(),
        "metrics_export_port": free_port(), "resources": {"head": 1}})
    temps = []
    for i in range(1, n):
        temps.append(tempfile.mkdtemp(prefix=f"rldbg-node{i}-"))
        atexit.register(shutil.rmtree, temps[-1], True)   # after the cluster's shutdown, however main ends
        # Each node its own temp dir, as on separate machines: sharing one, a node's runtime-env agent
        # unpacks a job's working directory over the one the driver runs in (Ray's working_dir
        # plugin overwrites), and the driver's imports fail for that moment.
        cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1", dashboard_agent_listen_port=free_port(),
                         metrics_export_port=free_port(), resources={f"worker{i}": 1},
                         temp_dir=temps[-1])
    cluster.wait_for_nodes()
    nodes = [{"node_id": node.node_id, "head": node is cluster.head_node}
             for node in [cluster.head_node, *cluster.worker_nodes]]
    if "--no-profiling" not in sys.argv:   # the route answers 403 before it looks for the agent
        wait_for_agents(f"http://127.0.0.1:{dash}", [n["node_id"] for n in nodes])
    print(json.dumps({"address": cluster.address, "dashboard": f"http://127.0.0.1:{dash}", "nodes": nodes}),
          flush=True)
    by_id = {node.node_id: node for node in cluster.worker_nodes}
    try:
        for line in sys.stdin:   # until the test closes our stdin (or dies)
            cmd, _, node_id = line.strip().partition(" ")
            if cmd == "kill" and node_id in by_id:
                cluster.remove_node(by_id.pop(node_id), allow_graceful=False)
                print(json.dumps({"killed": node_id}), flush=True)
            else:
                print(json.dumps({"error": f"unknown command {line.strip()!r}: expected kill WORKER_NODE_ID"}),
                      flush=True)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
