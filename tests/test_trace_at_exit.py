"""A driver that ends without rldbg.trace.stop() or ray.shutdown() (VeRL's main_ppo, a script that
just returns, a SystemExit): the trace is exported at exit, when Python no longer starts threads
for the exporter's pool, and is a whole trace, not a spill left behind."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

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
