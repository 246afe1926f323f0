"""A real hang between ranks: rank 1 of a gloo group sits in all_reduce while rank 0 waits on an
event inside the same method. `rldbg stack --role critic`, run as the console script with the venv
NOT on PATH (py-spy must be found beside the interpreter), names the odd rank out."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from polling import until


@pytest.fixture(scope="module")
def hung_critic(ray_cluster):
    import ray
    from prof_workers import CollectiveRank

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = f"hang-{uuid.uuid4().hex[:6]}"
    ranks = [ray.remote(CollectiveRank).options(name=f"{run}:critic:rank{r}", num_cpus=0).remote("critic", r, 2, port)
             for r in range(2)]
    ray.get([r.join.remote() for r in ranks])
    refs = [r.update_critic.remote(1, 120) for r in ranks]
    try:
        yield ray_cluster, run
    finally:
        for r in ranks:
            ray.kill(r)
        del refs


def _rldbg_stack(url, run, *extra):
    exe = str(Path(sys.executable).with_name("rldbg"))
    env = {k: v for k, v in os.environ.items() if k not in ("PATH", "RAY_AUTH_MODE")}
    env["PATH"] = "/usr/bin:/bin"   # like `venv/bin/rldbg` from a shell where the venv is not active
    return subprocess.run([exe, "stack", "--address", url, "--role", "critic", "--run", run, *extra],
                          capture_output=True, text=True, timeout=120, env=env)


def test_stack_names_the_rank_outside_the_collective(hung_critic):
    url, run = hung_critic

    def explained():
        r = _rldbg_stack(url, run)
        return r if r.returncode == 0 and r.stdout.startswith("critic: rank 1 waits in all_reduce") else None
    r = until(explained, what="rank 1 inside all_reduce and the explanation", limit=60)
    first = r.stdout.splitlines()[0]
    assert "rank 0 is not in the collective: Event.wait in CollectiveRank.update_critic (" in first, r.stdout
    assert "prof_workers.py:" in first
    assert "py-spy is not installed" not in r.stdout + r.stderr
    assert "[idle]" not in r.stdout, "a rank blocked in a wait is waiting, not idle"
    assert "waiting in all_reduce" in r.stdout and "waiting: Event.wait" in r.stdout

    data = json.loads(_rldbg_stack(url, run, "--json").stdout)
    assert data["explanation"] and data["explanation"][0].startswith("critic: rank 1 waits in all_reduce")
    labels = {w["label"] for g in data["groups"] for w in g["workers"]}
    assert labels == {"critic rank 0", "critic rank 1"}


def test_the_drivers_slow_call_report_explains_the_hang(hung_critic, monkeypatch):
    """What the driver prints while a worker-group call waits (rldbg.instrument.call_waiting)."""
    url, run = hung_critic
    from rldbg.debug import wait_report
    monkeypatch.setattr(wait_report, "_last_check", 0.0)
    lines = until(lambda: wait_report.report("critic", "update_critic", hash(run), 61.0) if
                  monkeypatch.setattr(wait_report, "_last_check", 0.0) is None and
                  monkeypatch.setenv("RAY_DASHBOARD_ADDRESS", url) is None else None,
                  what="the hang explanation", limit=60)
    assert lines[0].startswith("rldbg: critic.update_critic has waited 61 s: critic: rank 1 waits in all_reduce"), lines
    assert "rank 0 is not in the collective" in lines[0]
