"""The memory detectors on real trainer runs: `python -m reference_trainer` then `rldbg report`, both as
a user runs them. Enough steps that the rules get to judge every rank. A healthy run: every freeing
transition returns its bytes, nothing is named (so this test could see a false alarm). Faults
injected from the test side (tests/faults) on rank 1 only: rank 1's sleep and leak are named, and
nothing of rank 0's. (One rank keeping 40 MiB per cycle in plain Ray actors: test_report.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from rldbg.memory.leaks import MIN_CYCLES, WARMUP_CYCLES
from rldbg.trace.events import moves
from rldbg.trace.report import read_trace
import pytest

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

STEPS = WARMUP_CYCLES + MIN_CYCLES + 2


FAULTS = str(Path(__file__).parent / "faults")


def _train_and_report(run: Path, **env_extra) -> tuple[str, dict]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}   # its own embedded cluster
    env.update(env_extra)
    train = subprocess.run(
        [sys.executable, "-m", "reference_trainer", "--preset", "demo", f"trainer.run_dir={run}",
         f"trainer.total_steps={STEPS}", "trainer.progress=false", "control.enabled=false", "resources.ray_num_cpus=2"],
        capture_output=True, text=True, timeout=600, env=env)
    assert train.returncode == 0, train.stderr[-3000:]
    trace = str(run / "trace.json.gz")
    text, js = (subprocess.run([sys.executable, "-m", "rldbg", "report", *flag, trace], capture_output=True,
                               text=True, timeout=120) for flag in ([], ["--json"]))
    assert text.returncode == 0 and js.returncode == 0, text.stderr + js.stderr
    return text.stdout, json.loads(js.stdout)


def _verdicts(report: dict) -> dict:
    return {(r["rank"], r["transition"].split(" [")[0]): r["verdict"] for r in report["transitions"]}


def test_healthy_trainer_run_reports_no_leak(tmp_path):
    run = tmp_path / "healthy"
    text, report = _train_and_report(run)
    assert "leak suspicions: none" in text, text
    assert "memory not returned: none" in text, text
    verdicts = _verdicts(report)
    for rank in (0, 1):   # the table judged what each rank's offload and sleep gave back (RSS on CPU)
        for name in ("offload_optimizer", "rollout_sleep", "release_kv_cache"):
            assert verdicts[(rank, name)] == "returned", report["transitions"]
    trace = str(run / "trace.json.gz")
    # The rule had enough cycles to judge: every actor rank ran each freeing transition every step.
    t = read_trace(trace)
    cycles = Counter((s["role"], s["rank"], s["name"]) for s in t.transitions if moves(s["args"])[0])
    judged = {k for k, n in cycles.items() if n >= WARMUP_CYCLES + MIN_CYCLES}
    assert {("actor", 0, "offload_optimizer"), ("actor", 1, "offload_optimizer")} <= judged, cycles


def test_faults_injected_in_rank_1_are_named_and_only_they(tmp_path):
    """The rollout engine's sleep keeps a reference to its weights, and every to_train_mode keeps
    32 MiB that no ledger category accounts for, on rank 1 only (tests/faults/sitecustomize.py)."""
    text, report = _train_and_report(tmp_path / "faults", PYTHONPATH=os.pathsep.join(
        p for p in (FAULTS, os.environ.get("PYTHONPATH")) if p), TEST_FAULT="sleep_keeps_weights,train_mode_leaks",
        TEST_FAULT_RANKS="1")
    named = [(f["role"], f["rank"], f["transition"].split(" [")[0]) for f in report["not_returned"]]
    assert named == [("actor", 1, "rollout_sleep")], text
    assert "actor rank 1: rollout_sleep frees" in text
    assert {(k["role"], k["rank"], k["category"]) for k in report["leaks"]} == {("actor", 1, "unaccounted")}, text
    assert all(30 << 20 <= k["bytes_per_cycle"] <= 34 << 20 for k in report["leaks"])
    verdicts = _verdicts(report)
    assert verdicts[(0, "rollout_sleep")] == "returned" and verdicts[(1, "rollout_sleep")] == "rss_kept"
