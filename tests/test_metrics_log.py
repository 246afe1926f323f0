"""metrics.jsonl holds one run: a new run in a used run_dir starts it afresh, a resumed run (from a
checkpoint's step) goes on with it."""
from __future__ import annotations

import json

from reference_trainer.metrics_log import MetricsLog


def _run(run_dir, start, steps):
    log = MetricsLog(str(run_dir), total_steps=start + steps, start_step=start, progress=False, loggers=["jsonl"])
    for step in range(start, start + steps):
        log.write({"step": step, "reward/mean": 0.5})
    log.close()
    return [json.loads(ln)["step"] for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_new_run_starts_the_file_and_a_resumed_one_goes_on(tmp_path):
    assert _run(tmp_path, 0, 3) == [0, 1, 2]
    assert _run(tmp_path, 0, 2) == [0, 1]            # a new run in the same run_dir
    assert _run(tmp_path, 2, 2) == [0, 1, 2, 3]      # resumed at step 2
