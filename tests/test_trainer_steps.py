"""PPO/GRPO steps through real worker groups: data-parallel ranks stay identical, uneven
batches train, checkpoints resume, bad configs fail before any work."""
from __future__ import annotations

import json

import pytest

from reference_trainer.config import ConfigError, load_config
from reference_trainer.data import PromptSource
from reference_trainer.roles import build_role_groups
from reference_trainer.single_controller import shutdown_groups
from reference_trainer.tasks import build_tokenizer, get_task
from reference_trainer.trainer import fit, train_step


def _cfg(tmp_path, *extra):
    return load_config("demo", overrides=[f"trainer.run_dir={tmp_path}", "trace.enabled=false",
                                          "sft.steps=0", "trainer.progress=false", *extra])


def _run_steps(cfg, steps):
    groups = build_role_groups(cfg)
    try:
        actor, critic, reward = groups["actor"], groups.get("critic"), groups["reward"]
        for g in (actor, reward, critic):
            if g:
                g.init_model()
        src = PromptSource(get_task(cfg.data.task), build_tokenizer(), cfg.data.prompts_per_step,
                           cfg.data.group_size, 0)
        before = actor.weights_checksum()
        records = [train_step(s, src.batch(s), actor, critic, reward, cfg) for s in range(steps)]
        return before, actor.weights_checksum(), records
    finally:
        shutdown_groups(groups.values())


def test_dp_ranks_hold_identical_actor_weights_after_updates(ray_cluster, tmp_path):
    before, after, records = _run_steps(_cfg(tmp_path, "data.prompts_per_step=4", "data.group_size=4",
                                              "actor.mini_batch_size=8", "critic.mini_batch_size=8",
                                              "actor.micro_batch_size=8", "critic.micro_batch_size=8"), 2)
    assert before[0] == before[1]
    assert after[0] == pytest.approx(after[1], rel=0, abs=1e-9)
    assert after[0] != before[0]
    assert records[-1]["grad_norm"] > 0


def test_batch_of_five_over_two_ranks_trains_with_ppo(ray_cluster, tmp_path):
    cfg = _cfg(tmp_path, "algorithm.adv_estimator=gae", "data.prompts_per_step=5", "data.group_size=1",
               "actor.mini_batch_size=5", "critic.mini_batch_size=5",
               "actor.micro_batch_size=5", "critic.micro_batch_size=5")
    before, after, records = _run_steps(cfg, 1)
    assert after[0] == pytest.approx(after[1], rel=0, abs=1e-9) and after[0] != before[0]
    assert "critic/vf_loss" in records[0]


def test_impossible_mini_batch_fails_before_work_with_the_key_to_change():
    with pytest.raises(ConfigError, match=r"actor.mini_batch_size=1 is smaller than resources.n_ranks=2"):
        load_config("demo", overrides=["actor.mini_batch_size=1", "data.prompts_per_step=1", "data.group_size=2"])


def test_fit_checkpoints_and_resumes(ray_cluster, tmp_path):
    cfg = _cfg(tmp_path, "trainer.total_steps=2", "trainer.save_every=1", "data.prompts_per_step=4",
               "data.group_size=4", "actor.mini_batch_size=16", "critic.mini_batch_size=16",
               "actor.micro_batch_size=16", "critic.micro_batch_size=16")
    first = fit(cfg)
    assert [r["step"] for r in first] == [0, 1]
    assert (tmp_path / "checkpoints" / "step_1" / "actor.pt").exists()
    cfg = _cfg(tmp_path, "trainer.total_steps=3", "trainer.resume=true", "data.prompts_per_step=4",
               "data.group_size=4", "actor.mini_batch_size=16", "critic.mini_batch_size=16",
               "actor.micro_batch_size=16", "critic.micro_batch_size=16")
    second = fit(cfg)
    assert [r["step"] for r in second] == [2]
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2]
    for key in ("reward/mean", "kl_to_ref", "actor/entropy", "grad_norm", "time/rollout", "tokens_per_s"):
        assert key in lines[-1]


def test_critic_and_reward_in_their_own_pools(ray_cluster, tmp_path):
    cfg = _cfg(tmp_path, "algorithm.adv_estimator=gae", "resources.critic_pool=own", "resources.reward_pool=own",
               "data.prompts_per_step=4", "data.group_size=2", "actor.mini_batch_size=8", "critic.mini_batch_size=8",
               "actor.micro_batch_size=8", "critic.micro_batch_size=8")
    groups = build_role_groups(cfg)
    try:
        pools = {name: g.pool.name for name, g in groups.items()}
        assert pools == {"actor": "main", "critic": "critic", "reward": "reward"}
        assert groups["actor"].hosts[0] is not groups["critic"].hosts[0]
    finally:
        shutdown_groups(groups.values())
    before, after, records = _run_steps(cfg, 1)
    assert "critic/vf_loss" in records[0] and after[0] != before[0]


def test_kl_metric_off_skips_the_reference_forward_unless_a_kl_term_needs_it(ray_cluster, tmp_path):
    from reference_trainer.trainer import needs_ref_log_prob

    small = ["data.prompts_per_step=4", "data.group_size=4", "actor.mini_batch_size=16", "actor.micro_batch_size=8"]
    cfg = _cfg(tmp_path, "actor.kl_metric=false", *small)
    assert needs_ref_log_prob(_cfg(tmp_path, *small))     # the default keeps the kl_to_ref metric
    assert needs_ref_log_prob(_cfg(tmp_path, "actor.kl_metric=false", "actor.use_kl_loss=true"))
    assert needs_ref_log_prob(_cfg(tmp_path, "actor.kl_metric=false", "algorithm.kl_in_reward=true"))
    assert not needs_ref_log_prob(cfg)
    before, after, records = _run_steps(cfg, 1)
    assert "kl_to_ref" not in records[0] and after[0] != before[0]
    assert records[0]["grad_norm"] > 0
