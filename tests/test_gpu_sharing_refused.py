"""Ranks that would share a GPU under NCCL are refused before any work, in one line naming the keys
to change: NCCL itself fails only after every rank built its model ("Duplicate GPU detected",
~48 s into a run on an H200). The refusal is the config's, so it is checked here without a GPU
(bench/gpu_check.sh times it on one: 83 ms on an H200)."""
from __future__ import annotations

import subprocess
import sys

import pytest


def test_two_ranks_on_one_gpu_are_refused_before_ray_starts(tmp_path):
    out = subprocess.run([sys.executable, "-m", "reference_trainer", "--preset", "demo", "resources.device=cuda",
                          "resources.gpus_per_rank=0.5", "resources.n_ranks=2", f"trainer.run_dir={tmp_path}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("config error: resources.gpus_per_rank=0.5 with resources.n_ranks=2 ")
    assert "resources.gpus_per_rank=1" in lines[0] and "resources.n_ranks=1" in lines[0]
    assert "Ray" not in out.stdout and not (tmp_path / "trace.json.gz").exists()


@pytest.mark.parametrize("overrides", [["resources.gpus_per_rank=0.5", "resources.n_ranks=1"],
                                       ["resources.gpus_per_rank=1", "resources.n_ranks=2"],
                                       ["resources.device=cpu", "resources.gpus_per_rank=0.5"]])
def test_one_rank_a_gpu_or_a_cpu_run_passes(overrides, tmp_path):
    from reference_trainer.config import load_config

    device = [] if any(o.startswith("resources.device") for o in overrides) else ["resources.device=cuda"]
    load_config("demo", overrides=[*device, *overrides, f"trainer.run_dir={tmp_path}"])
