"""The leak rule on a real, healthy trainer run: `python -m reference_trainer` then `rldbg report`,
both as a user runs them. Enough steps that the rule gets to judge every rank (so this test could
see a false alarm); the injected-leak side is in test_report.py (one rank keeps 40 MiB per cycle)."""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

from rldbg.memory.leaks import MIN_CYCLES, WARMUP_CYCLES
from rldbg.trace.events import moves
from rldbg.trace.load import load_events
from rldbg.trace.report import Trace

STEPS = WARMUP_CYCLES + MIN_CYCLES + 2


def test_healthy_trainer_run_reports_no_leak(tmp_path):
    run = tmp_path / "healthy"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}   # its own embedded cluster
    train = subprocess.run(
        [sys.executable, "-m", "reference_trainer", "--preset", "demo", f"trainer.run_dir={run}",
         f"trainer.total_steps={STEPS}", "trainer.progress=false", "control.enabled=false", "resources.ray_num_cpus=2"],
        capture_output=True, text=True, timeout=600, env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    trace = str(run / "trace.json.gz")
    report = subprocess.run([sys.executable, "-m", "rldbg", "report", trace], capture_output=True, text=True,
                            timeout=120)
    assert report.returncode == 0, report.stderr
    assert "leak suspicions: none" in report.stdout, report.stdout
    # The rule had enough cycles to judge: every actor rank ran each freeing transition every step.
    t = Trace(load_events(trace))
    cycles = Counter((s["role"], s["rank"], s["name"]) for s in t.transitions if moves(s["args"])[0])
    judged = {k for k, n in cycles.items() if n >= WARMUP_CYCLES + MIN_CYCLES}
    assert {("actor", 0, "offload_optimizer"), ("actor", 1, "offload_optimizer")} <= judged, cycles
