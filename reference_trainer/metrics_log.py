"""Per-step metrics to the places RL people look, chosen by `trainer.logger` (VeRL's convention):
  console      a compact line per step and a progress bar
  jsonl        one JSON object per step in <run_dir>/metrics.jsonl
  tensorboard  scalars in <run_dir>/tb/metrics, beside the torch-profiler runs `rldbg tb` serves
  wandb        a Weights & Biases run (needs the `wandb` package; WANDB_MODE=offline works offline)
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from numbers import Real
from pathlib import Path

from tqdm import tqdm

LOGGERS = ("console", "jsonl", "tensorboard", "wandb")


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


def _scalars(record: dict) -> dict:
    return {k: float(v) for k, v in record.items()
            if k != "step" and isinstance(v, Real) and not isinstance(v, bool)}


class _Console:
    COLUMNS = (("reward", "reward/mean"), ("kl", "kl_to_ref"), ("ent", "actor/entropy"),
               ("clip", "actor/clipfrac"), ("gnorm", "grad_norm"), ("vf", "critic/vf_loss"))

    def __init__(self, total_steps: int, start_step: int, progress: bool):
        # disable=None: no bar where stderr is no terminal (a log file, a Ray job's log), whose \r
        # redraws would fill it; the lines below are printed plainly there instead.
        self._bar = tqdm(total=total_steps, initial=start_step, disable=None if progress else True, unit="step",
                         dynamic_ncols=True, leave=True)

    def write(self, record: dict) -> None:
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


class _Jsonl:
    def __init__(self, run_dir: Path, resumed: bool):
        self.path = run_dir / "metrics.jsonl"
        # A resumed run goes on with its file; a new run in the same run_dir starts it afresh (its
        # steps from 0 after the last run's would read as one run).
        self._file = self.path.open("a" if resumed else "w")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class _TensorBoard:
    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter
        self.dir = run_dir / "tb" / "metrics"
        self._w = SummaryWriter(log_dir=str(self.dir), flush_secs=5)

    def write(self, record: dict) -> None:
        for k, v in _scalars(record).items():
            self._w.add_scalar(k, v, global_step=record["step"])

    def close(self) -> None:
        self._w.close()


class _Wandb:
    def __init__(self, run_dir: Path, config: dict | None):
        try:
            import wandb
        except ImportError:
            raise RuntimeError("trainer.logger has 'wandb' but the wandb package is not installed "
                               "(pip install wandb), or drop 'wandb' from trainer.logger") from None
        self._run = wandb.init(project="rldbg-reference-trainer", name=run_dir.name, dir=str(run_dir),
                               config=config or {}, reinit="finish_previous")

    def write(self, record: dict) -> None:
        self._run.log(_scalars(record), step=record["step"])

    def close(self) -> None:
        self._run.finish()


class MetricsLog:
    """Fans each step's record out to the configured loggers."""

    def __init__(self, run_dir: str, total_steps: int, start_step: int, progress: bool,
                 loggers=("console", "jsonl"), config: dict | None = None):
        unknown = [n for n in loggers if n not in LOGGERS]
        if unknown:
            raise ValueError(f"trainer.logger has {unknown}; accepted: {', '.join(LOGGERS)}")
        run = Path(run_dir)
        run.mkdir(parents=True, exist_ok=True)
        self.path = run / "metrics.jsonl"
        self._sinks = []
        try:
            for name in dict.fromkeys(loggers):   # keep order, drop repeats
                self._sinks.append(
                    _Console(total_steps, start_step, progress) if name == "console" else
                    _Jsonl(run, resumed=start_step > 0) if name == "jsonl" else
                    _TensorBoard(run) if name == "tensorboard" else
                    _Wandb(run, config))
        except Exception:
            self.close()
            raise

    def write(self, record: dict) -> None:
        for s in self._sinks:
            s.write(record)

    def close(self) -> None:
        for s in self._sinks:
            s.close()
        self._sinks = []
