"""A bad key=value on the trainer's command line is refused in one line that names the key, the
value given and what the key takes, before Ray or a model starts (exit 2)."""
from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("override, expected", [
    ("trainer.total_steps=abc", "config error: config key 'trainer.total_steps' needs an integer, got 'abc'"),
    ("actor.lr=fast", "config error: config key 'actor.lr' needs a number, got 'fast'"),
    ("trace.enabled=maybe", "config error: config key 'trace.enabled' needs true or false, got 'maybe'"),
    ("trace.window=-3", "config error: config key 'trace.window' must be ≥ 0, got -3"),
    ("nosuch.key=1", "config error: unknown config key 'nosuch.key'; known keys under the top level: "),
    # nan passes every `value <= 0` bound; both failed inside the workers after Ray started
    ("actor.lr=nan", "config error: config key 'actor.lr' needs a finite number, got 'nan'"),
    ("rollout.temperature=inf", "config error: config key 'rollout.temperature' needs a finite number, got 'inf'"),
    # known on the driver, not in a worker's init_model after Ray started
    ("model.preset=nope", "config error: config key 'model.preset' is 'nope'; accepted: "),
    ("model.preset=/", "config error: config key 'model.preset' is the folder '/', which holds no config.json"),
])
def test_a_bad_override_is_one_line_before_any_work(override, expected, tmp_path):
    out = subprocess.run([sys.executable, "-m", "reference_trainer", "--preset", "demo", override,
                          f"trainer.run_dir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), out.stderr
    assert "Ray" not in out.stdout + out.stderr and not any(tmp_path.iterdir())
