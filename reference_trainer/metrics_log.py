"""Per-step metrics: one JSON line per step in <run_dir>/metrics.jsonl, a compact console
line and a progress bar."""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path

from tqdm import tqdm


class PhaseTimer:
    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0


class MetricsLog:
    COLUMNS = (("reward", "reward/mean"), ("kl", "kl_to_ref"), ("ent", "actor/entropy"),
               ("clip", "actor/clipfrac"), ("gnorm", "grad_norm"), ("vf", "critic/vf_loss"))

    def __init__(self, run_dir: str, total_steps: int, start_step: int, progress: bool):
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self.path = Path(run_dir) / "metrics.jsonl"
        self._file = self.path.open("a")
        self._bar = tqdm(total=total_steps, initial=start_step, disable=not progress, unit="step",
                         dynamic_ncols=True, leave=True)

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        parts = [f"step {record['step']:>4}"]
        for label, key in self.COLUMNS:
            if key in record:
                parts.append(f"{label} {record[key]:.3f}")
        phases = " ".join(f"{k[5:]} {v:.2f}" for k, v in record.items() if k.startswith("time/"))
        line = " | ".join(parts) + f" | s: {phases}"
        if self._bar.disable:
            print(line, flush=True)
        else:
            self._bar.write(line)
            self._bar.update(1)

    def close(self) -> None:
        self._bar.close()
        self._file.close()
