"""The trainer really learns: GRPO and PPO (GAE + critic) on the demo task, 2 ranks on the
session's Ray cluster, end with a mean reward over the last 5 steps at least 0.5 above the
first 5 steps'. These are the slowest tests (about 1-2 minutes each on 2 idle cores)."""
from __future__ import annotations

import pytest

from reference_trainer.config import load_config
from reference_trainer.trainer import fit

pytestmark = pytest.mark.slow
STEPS = 100


@pytest.mark.parametrize("estimator", ["grpo", "gae"])
def test_reward_rises_by_half(ray_cluster, tmp_path, estimator):
    cfg = load_config("demo", overrides=[
        f"algorithm.adv_estimator={estimator}", f"trainer.total_steps={STEPS}", f"trainer.run_dir={tmp_path}",
        "trace.enabled=false", "control.enabled=false", "trainer.progress=false"])
    history = fit(cfg)
    rewards = [r["reward/mean"] for r in history]
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    curve = [round(sum(rewards[i:i + 10]) / 10, 3) for i in range(0, len(rewards), 10)]
    print(f"{estimator}: first 5 steps {first:.3f}, last 5 steps {last:.3f}; per 10 steps {curve}")
    assert last >= first + 0.5, f"{estimator} did not learn: first {first:.3f}, last {last:.3f}, curve {curve}"
