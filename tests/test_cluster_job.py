"""The reference trainer as a Ray job on a running multi-node cluster, the way users run it:
`ray job submit --working-dir . -- python -m reference_trainer ...` against a `ray start`-style head,
`rldbg top --once` finding the job's hub from another process, and `ray job stop` ending it cleanly
with the trace exported. The cluster is held by tests/cluster_host.py (its own ports, shut down
when the session ends; the multi-node tests share it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ray_cli_env
from polling import until

REPO = Path(__file__).resolve().parent.parent


def _ray_job(cluster, *args, timeout=120):
    ray_cli = str(Path(sys.executable).with_name("ray"))
    return subprocess.run([ray_cli, "job", args[0], "--address", cluster["dashboard"], *args[1:]], capture_output=True,
                          text=True, timeout=timeout, env=ray_cli_env(), cwd=REPO)


def _status(cluster, sub_id) -> str:
    r = _ray_job(cluster, "status", sub_id)
    return r.stdout + r.stderr


@pytest.mark.slow
def test_job_submit_top_and_stop_exports_the_trace(two_nodes, tmp_path):
    cluster = two_nodes
    run = tmp_path / "jobrun"
    sub_id = f"rldbg-test-{os.getpid()}"
    # Ray SIGKILLs a stopped job's entrypoint 3 s after SIGTERM by default; exporting the trace on a
    # loaded 2-core machine can take longer, so the job asks for more, as the README says to.
    grace = json.dumps({"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "60"}})
    r = _ray_job(cluster, "submit", "--no-wait", "--submission-id", sub_id, "--working-dir", ".",
                 "--runtime-env-json", grace, "--",
                 sys.executable, "-m", "reference_trainer", "--preset", "demo", "trainer.total_steps=400",
                 "sft.steps=0", f"trainer.run_dir={run}", "trainer.progress=false", timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    try:
        metrics = run / "metrics.jsonl"
        try:
            until(lambda: metrics.exists() and len(metrics.read_text().splitlines()) >= 3,
                  what="the job's first steps", limit=240)
        except AssertionError:
            raise AssertionError(_status(cluster, sub_id) + _ray_job(cluster, "logs", sub_id).stdout[-3000:]) from None

        # A second process finds the job's hub through the cluster's dashboard.
        top = subprocess.run([sys.executable, "-m", "rldbg", "top", "--once", "--address", cluster["dashboard"]],
                             capture_output=True, text=True, timeout=120, env=ray_cli_env())
        assert top.returncode == 0, top.stdout[-2000:] + top.stderr[-2000:]
        assert "actor" in top.stdout and "reward" in top.stdout, top.stdout

        stop = _ray_job(cluster, "stop", sub_id, timeout=120)
        assert stop.returncode == 0, stop.stderr[-2000:]
        until(lambda: "stopped" in _status(cluster, sub_id).lower(), what="the job to stop", limit=60)
    finally:
        _ray_job(cluster, "stop", "--no-wait", sub_id)

    trace = run / "trace.json.gz"
    logs = _ray_job(cluster, "logs", sub_id).stdout
    assert trace.exists(), f"ray job stop left no trace: {sorted(p.name for p in run.iterdir())}\n{logs[-3000:]}"
    rep = subprocess.run([sys.executable, "-m", "rldbg", "report", "--json", str(trace)], capture_output=True,
                         text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["time"]["steps"] >= 3
    assert "stopped by SIGTERM" in logs, logs[-3000:]
