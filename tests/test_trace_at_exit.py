"""A driver that ends without rldbg.trace.stop() or ray.shutdown() (VeRL's main_ppo, a script that
just returns, a SystemExit): the trace is exported at exit, when Python no longer starts threads
for the exporter's pool, and is a whole trace, not a spill left behind."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

from polling import until

SCRIPT = """
import sys, ray, rldbg, rldbg.trace
ray.init(address=sys.argv[2], log_to_driver=False)
rldbg.trace.start(sys.argv[1])
for step in range(3):
    with rldbg.span("work", step=step):
        pass
sys.exit(0)   # neither trace.stop() nor ray.shutdown(): the atexit handler exports
"""


def test_a_driver_that_just_exits_leaves_a_whole_trace(ray_cluster, tmp_path):
    import ray

    from conftest import ray_cli_env
    path = tmp_path / "exit.json.gz"
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(path), ray.get_runtime_context().gcs_address],
                         capture_output=True, text=True, timeout=180, env=ray_cli_env())
    assert out.returncode == 0, out.stderr[-3000:]
    assert "cannot schedule new futures" not in out.stderr, out.stderr[-3000:]
    events = json.loads(gzip.decompress(path.read_bytes()))   # whole JSON: the export ran to its end
    assert len([e for e in events if e.get("name") == "work"]) == 3


KILLED = """
import os, sys, time, ray, rldbg, rldbg.trace
ray.init(address=sys.argv[2], log_to_driver=False)
rldbg.trace.start(sys.argv[1], flush_interval=0.2)
with rldbg.span("first run's work", step=0):
    pass
time.sleep(2)          # shipped and spilled
os._exit(9)            # as a SIGKILL would: no export
"""


def test_a_killed_runs_spill_is_moved_aside_not_wiped_by_the_next_run(ray_cluster, tmp_path):
    """The killed run's events are its only record: the next trace at the same path moves them
    aside and says where, and `rldbg export` reads them there; an exported run's spill is simply
    replaced."""
    import ray

    from conftest import ray_cli_env
    path, gcs = tmp_path / "run.json.gz", ray.get_runtime_context().gcs_address
    killed = subprocess.run([sys.executable, "-c", KILLED, str(path), gcs], capture_output=True, text=True,
                            timeout=180, env=ray_cli_env())
    assert killed.returncode == 9 and not path.exists(), killed.stderr[-3000:]
    # Its collector entry stays in the cluster's KV store; `rldbg dump` does not count a dead job's.
    until(lambda: "no traced job on the Ray cluster" in subprocess.run(
        [sys.executable, "-m", "rldbg", "dump", "--address", gcs], capture_output=True, text=True, timeout=120,
        env=ray_cli_env()).stderr, "the killed job counted dead", limit=60)
    again = subprocess.run([sys.executable, "-c", SCRIPT, str(path), gcs], capture_output=True, text=True,
                           timeout=180, env=ray_cli_env())
    assert again.returncode == 0, again.stderr[-3000:]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run-unexported-")]
    assert len(aside) == 1 and f"moved to {aside[0]}" in again.stderr, (list(tmp_path.iterdir()), again.stderr)
    out = tmp_path / "first.json"
    assert subprocess.run([sys.executable, "-m", "rldbg", "export", str(aside[0]), "-o", str(out)],
                          capture_output=True, text=True, timeout=120).returncode == 0
    assert [e for e in json.loads(out.read_text()) if e.get("name") == "first run's work"]
    third = subprocess.run([sys.executable, "-c", SCRIPT, str(path), gcs], capture_output=True, text=True,
                           timeout=180, env=ray_cli_env())   # the second run was exported: nothing to keep
    assert third.returncode == 0 and "moved to" not in third.stderr, third.stderr[-3000:]
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("run-unexported-")]) == 1
