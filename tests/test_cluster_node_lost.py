"""A non-head node lost mid-run: the reference trainer, its two actor ranks on two nodes of a real
2-node cluster (tests/cluster_host.py, 1 CPU per node, profiling routes off), is running when the
non-head node is killed the hard way (raylet and all its processes SIGKILLed). The run ends with one
line naming the lost node and its rank, not a Ray traceback; the trace is exported, loads in
`rldbg report` and in Perfetto's trace processor with zero import errors, and keeps the lost
rank's events up to the kill.

The cluster is this module's own (a node is killed), not the session's `two_nodes`. With profiling
off on it, it also shows what `rldbg stack` says when the dashboard refuses the profiling routes."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import cluster_host, ray_cli_env
from polling import until

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def small_cluster():
    with cluster_host("--no-profiling", "--fast-node-death") as (info, proc):
        yield dict(info, proc=proc)


def _kill_node(cluster, node_id: str) -> None:
    cluster["proc"].stdin.write(f"kill {node_id}\n")
    cluster["proc"].stdin.flush()
    assert json.loads(cluster["proc"].stdout.readline()) == {"killed": node_id}


@pytest.mark.slow
def test_losing_a_node_names_it_and_keeps_the_trace(small_cluster, tmp_path):
    cluster = small_cluster
    head = next(n["node_id"] for n in cluster["nodes"] if n["head"])
    other = next(n["node_id"] for n in cluster["nodes"] if not n["head"])
    run = tmp_path / "run"
    # cpus_per_rank=1 on two 1-CPU nodes: the PACK placement group must put one rank on each node.
    trainer = subprocess.Popen(
        [sys.executable, "-m", "reference_trainer", "--preset", "demo", "trainer.total_steps=400", "sft.steps=0",
         "resources.cpus_per_rank=1", f"trainer.run_dir={run}", "trainer.progress=false",
         "data.prompts_per_step=4", "data.group_size=4", "actor.mini_batch_size=16", "actor.micro_batch_size=8"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env=ray_cli_env(RAY_ADDRESS=cluster["address"]))
    try:
        metrics = run / "metrics.jsonl"
        until(lambda: trainer.poll() is None and metrics.exists() and len(metrics.read_text().splitlines()) >= 2,
              what="the trainer's first steps", limit=240)

        # Profiling routes are off on this cluster: asked to go through the dashboard, `rldbg stack`
        # says in one line what to turn on, and where.
        st = subprocess.run([sys.executable, "-m", "rldbg", "stack", "--role", "actor", "--via", "dashboard",
                             "--address", cluster["dashboard"]], capture_output=True, text=True, timeout=120,
                            env=ray_cli_env())
        assert st.returncode == 1, st.stdout + st.stderr
        said = [ln for ln in (st.stdout + st.stderr).splitlines() if "RAY_DASHBOARD_ENABLE_PROFILING=1" in ln]
        assert said and "ray start --head" in said[0], st.stdout + st.stderr

        # The control hub lives on the driver's node (the head here) and the trace's collector in
        # the driver itself, so losing the other node cannot take either with it.
        from rldbg.dashboard import Dashboard
        placed = {a["class_name"]: a.get("node_id") or (a.get("address") or {}).get("node_id")
                  for a in Dashboard(cluster["dashboard"]).actors(filters=[("state", "=", "ALIVE")])}
        assert placed.get("ControlHub") == head and "Collector" not in placed, placed

        _kill_node(cluster, other)
        out, err = trainer.communicate(timeout=180)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.communicate()

    assert trainer.returncode == 1, (out[-2000:], err[-4000:])
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, err[-4000:]
    # actor and reward share each rank's process (the demo colocates them): whichever call was running.
    m = re.match(r"error: (actor|reward) rank (\d) on node 127\.0\.0\.1 \((\w{8})\) died in \w+ at step \d+: "
                 r"its node was lost$", lines[0])
    assert m and m.group(3) == other[:8], lines[0]
    lost_rank = int(m.group(2))
    assert "Traceback" not in err, err[-4000:]

    trace = run / "trace.json.gz"
    assert trace.exists(), sorted(p.name for p in run.iterdir())
    rep = subprocess.run([sys.executable, "-m", "rldbg", "report", "--json", str(trace)], capture_output=True,
                         text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    ranks = {(r["role"], r["rank"]): r for r in json.loads(rep.stdout)["ranks"]}
    assert ranks[("actor", lost_rank)]["node"] == other and ranks[("actor", 1 - lost_rank)]["node"] == head

    from trace_processor import TraceProcessor
    with TraceProcessor(str(trace)) as proc:
        errors = proc.query("select name, idx, severity, source, value from stats "
                            "where severity in ('error', 'data_loss') and value > 0")
        assert errors == [], errors
        # The lost rank's events up to the kill were kept. The metrics file showed two finished
        # steps before `rldbg stack` ran (a fresh interpreter and a dashboard round trip: seconds,
        # against the trainer's shipping round every trace.flush_s = 1 s), so both ranks'
        # update_actor slices of the first two steps must be in the trace. How many later
        # steps the lost rank had shipped when its node died depends on the machine's load (its
        # unshipped tail is lost with it), so no count beyond those two is asserted.
        steps: dict = {}
        for r in proc.query(
                """select thread.name as rank, extract_arg(slice.arg_set_id, 'args.step') as step from slice
                   join thread_track tt on slice.track_id = tt.id join thread using(utid) join process using(upid)
                   where process.name = 'actor' and slice.name = 'update_actor'"""):
            steps.setdefault(r["rank"], set()).add(r["step"])
        lost, kept = steps.get(f"rank {lost_rank}", set()), steps.get(f"rank {1 - lost_rank}", set())
        first_two = sorted(kept)[:2]
        assert len(first_two) == 2 and set(first_two) <= lost, steps
        died = proc.query("select name, arg_set_id from slice where name = 'rank_died'")
        assert len(died) == 1, died


def test_only_a_lost_peer_is_read_as_one_and_unavailable_is_not_called_dead():
    import ray

    import rldbg
    from reference_trainer.runtime import peer_lost
    from rldbg.debug import death
    gloo = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
            "[127.0.0.1]:37251")
    assert peer_lost(gloo) and peer_lost("NCCL error: remote process exited or there was a network error")
    assert not peer_lost("ValueError: shapes (8, 3) and (4,) do not match")
    # Without Ray's verdict (no cluster here to ask), "unavailable" stays what it is: not a death cause.
    unavailable = ray.exceptions.ActorUnavailableError(
        "The actor is temporarily unavailable: RpcError: RPC error: failed to connect to all addresses; last error: "
        "UNKNOWN: ipv4:127.0.0.1:45733: Failed to connect to remote host: Connection refused rpc_code: 14",
        bytes(16))
    assert death.settle(unavailable, timeout=0.1) is unavailable
    said = death.cause(unavailable)
    dead = rldbg.actor_death(unavailable, timeout=0.1)   # the public form: the same verdict, with where
    assert dead.cause == said and dead.error is unavailable and dead.ip is None
    assert said.startswith("Ray could not reach it (") and "declared it dead" in said and "node was lost" not in said
