"""Checkpoints: <run_dir>/checkpoints/step_<N>/ holds each role's state and trainer.json."""
from __future__ import annotations

import json
from pathlib import Path


def step_dir(run_dir: str, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{step}"


def save(run_dir: str, step: int, actor, critic=None) -> Path:
    d = step_dir(run_dir, step)
    actor.save_checkpoint(str(d))
    if critic is not None:
        critic.save_checkpoint(str(d))
    (d / "trainer.json").write_text(json.dumps({"step": step}))
    return d


def latest(run_dir: str) -> Path | None:
    root = Path(run_dir) / "checkpoints"
    done = [d for d in root.glob("step_*") if (d / "trainer.json").exists()]
    return max(done, key=lambda d: int(d.name.split("_")[1]), default=None)


def resume(run_dir: str, actor, critic=None) -> int:
    """Load the newest complete checkpoint; returns the step to start from (0 if none)."""
    d = latest(run_dir)
    if d is None:
        return 0
    actor.load_checkpoint(str(d))
    if critic is not None:
        critic.load_checkpoint(str(d))
    return json.loads((d / "trainer.json").read_text())["step"] + 1
