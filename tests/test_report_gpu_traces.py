"""`rldbg report` on traces recorded on a real GPU (an H200, under Ray, by bench/gpu_check.sh), so
that CPU CI keeps testing the GPU memory analyses: what each transition returned to the device,
the detector of memory never returned, and GPU memory by process.

tests/data/gpu/:
  h200_llama_small_before_fix.json.gz  llama-small, 6 steps, before the trainer emptied the
      allocator's cache after its sleep: rollout_sleep frees 96.6 MiB and returns none of it
  h200_llama_small_stranger.json.gz    llama-small, 10 steps, after the fix, with a second process
      holding 1 GiB of the GPU (pid 1714) during the run
  h200_demo_faults.json.gz             the demo, 12 steps, with tests/faults' sleep_keeps_weights
      and train_mode_leaks injected
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "gpu"
MiB = 1 << 20


def _report(name: str, *flags: str) -> str:
    out = subprocess.run([sys.executable, "-m", "rldbg", "report", *flags, str(DATA / name)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _rows(report: dict) -> dict:
    return {r["transition"].split(" [")[0] + (" weights" if "+rollout_weights" in r["transition"] else ""): r
            for r in report["transitions"]}


def test_the_sleep_that_returned_nothing_is_named_with_its_bytes_and_cause():
    text = _report("h200_llama_small_before_fix.json.gz")
    named = [line for line in text.splitlines() if "rollout_sleep frees" in line]
    assert len(named) == 1, text
    assert "actor rank 0: rollout_sleep frees 96.6 MiB (rollout_weights, kv_cache) but returns 0.0 MiB to the GPU" \
        in named[0]
    assert "kept in the allocator's cache" in named[0] and "torch.cuda.empty_cache()" in named[0]
    r = json.loads(_report("h200_llama_small_before_fix.json.gz", "--json"))
    rows = _rows(r)
    sleep = rows["rollout_sleep"]
    assert sleep["verdict"] == "cached" and sleep["device"] == "cuda"
    assert round(sleep["ledger_freed"] / MiB, 1) == 96.6 and sleep["allocated_delta"] < -96 * MiB
    assert sleep["reserved_delta"] == 0 and sleep["device_delta"] == 0
    # offload_optimizer returned 300 MiB to the device (its ledger then counted host bytes: no verdict)
    assert rows["offload_optimizer"]["device_delta"] == -300 * MiB
    assert [f["transition"].split(" [")[0] for f in r["not_returned"]] == ["rollout_sleep"]


def test_after_the_fix_every_transition_returns_its_bytes_and_a_stranger_is_named_by_pid():
    r = json.loads(_report("h200_llama_small_stranger.json.gz", "--json"))
    rows = _rows(r)
    for name in ("offload_optimizer", "rollout_sleep", "release_kv_cache"):
        row = rows[name]
        assert row["verdict"] == "returned", row
        assert -row["device_delta"] >= 0.9 * row["ledger_freed"], row
    assert r["not_returned"] == [] and r["leaks"] == []
    (gpu,) = r["gpus"]
    by_pid = {p["pid"]: p for p in gpu["processes"]}
    assert by_pid[1714]["in_job"] is False and by_pid[1714]["peak_bytes"] >= 1024 * MiB
    ours = [p for p in gpu["processes"] if p["in_job"]]
    assert len(ours) == 1 and "actor rank 0" in ours[0]["who"]
    text = _report("h200_llama_small_stranger.json.gz")
    assert "memory not returned: none" in text and "leak suspicions: none" in text
    assert "pid 1714     not a rank of this job" in text


def test_injected_faults_are_named_and_nothing_else():
    r = json.loads(_report("h200_demo_faults.json.gz", "--json"))
    assert [(f["transition"].split(" [")[0], f["verdict"]) for f in r["not_returned"]] == [("rollout_sleep", "held")]
    found = r["not_returned"][0]
    assert (found["role"], found["rank"]) == ("actor", 0) and found["returned_bytes"] <= 0
    assert r["leaks"] and {(k["role"], k["rank"], k["category"]) for k in r["leaks"]} == {("actor", 0, "unaccounted")}
    assert all(31 * MiB <= k["bytes_per_cycle"] <= 33 * MiB for k in r["leaks"])
