"""On a real 2-node cluster (tests/cluster_host.py), a traced run's report names each rank's node:
rank 0 on the head, rank 1 on the other node, as Ray placed them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ray_cli_env
import pytest

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

HERE = Path(__file__).parent


def test_report_lists_the_two_ranks_on_their_two_nodes(two_nodes, tmp_path):
    cluster = two_nodes
    path = str(tmp_path / "trace.json")
    run = subprocess.run([sys.executable, str(HERE / "two_node_driver.py"), path], capture_output=True, text=True,
                         timeout=240, env=ray_cli_env(RAY_ADDRESS=cluster["address"]))
    assert run.returncode == 0, run.stderr[-3000:]
    where = json.loads(run.stdout.strip().splitlines()[-1])
    head = next(n["node_id"] for n in cluster["nodes"] if n["head"])
    other = next(n["node_id"] for n in cluster["nodes"] if not n["head"])
    assert where["0"][1] == head and where["1"][1] == other, (where, cluster["nodes"])

    r = subprocess.run([sys.executable, "-m", "rldbg", "report", "--json", path], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    ranks = {(x["role"], x["rank"]): x for x in json.loads(r.stdout)["ranks"]}
    assert (ranks[("actor", 0)]["node"], ranks[("actor", 0)]["pid"]) == (head, where["0"][0])
    assert (ranks[("actor", 1)]["node"], ranks[("actor", 1)]["pid"]) == (other, where["1"][0])
    assert ranks[("driver", 0)]["node"] == head
    text = subprocess.run([sys.executable, "-m", "rldbg", "report", path], capture_output=True, text=True,
                          timeout=120).stdout
    assert f"rank 0   node {head[:8]}" in text and f"rank 1   node {other[:8]}" in text, text


def test_the_flight_recorder_dumps_the_window_of_every_rank_on_both_nodes(two_nodes, tmp_path):
    cluster = two_nodes
    path = tmp_path / "trace.json"
    run = subprocess.run([sys.executable, str(HERE / "two_node_driver.py"), str(path), "4"], capture_output=True,
                         text=True, timeout=240, env=ray_cli_env(RAY_ADDRESS=cluster["address"]))
    assert run.returncode == 0, run.stderr[-3000:]
    status, where = (json.loads(x) for x in run.stdout.strip().splitlines()[-2:])
    assert status["state"] == "written" and status["step"] == 12, status
    # nothing else written: the dump and its store beside it (rldbg.store)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flight-12-manual.json.gz", "flight-12-manual.rldbg.db"]
    r = subprocess.run([sys.executable, "-m", "rldbg", "report", "--json", status["path"]], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["recorded"]["steps"] == [[9, 12]], rep["recorded"]
    ranks = {(x["role"], x["rank"]): x for x in rep["ranks"]}
    head = next(n["node_id"] for n in cluster["nodes"] if n["head"])
    other = next(n["node_id"] for n in cluster["nodes"] if not n["head"])
    assert (ranks[("actor", 0)]["node"], ranks[("actor", 1)]["node"]) == (head, other), ranks
    from rldbg.trace.report import analyse_trace
    _, t = analyse_trace(status["path"])
    calls = sorted((c["rank"], c["step"]) for c in t.calls if c["method"] == "work")
    assert calls == [(rank, step) for rank in (0, 1) for step in range(9, 13)], calls
