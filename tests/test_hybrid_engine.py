"""Hybrid-engine transitions free the memory they claim to (measured as process RSS on CPU
with the file offload target), and weight sync really copies the actor into the rollout."""
from __future__ import annotations

import pytest

from reference_trainer.config import load_config
from reference_trainer.data import sft_batch
from reference_trainer.roles import build_role_groups
from reference_trainer.single_controller import shutdown_groups
from reference_trainer.tasks import build_tokenizer, get_task

MB = 1 << 20


@pytest.fixture(scope="module")
def actor(ray_cluster, tmp_path_factory):
    cfg = load_config("demo", overrides=[
        "model.preset=llama-small", "resources.n_ranks=1", "rollout.sleep_level=2",
        f"trainer.run_dir={tmp_path_factory.mktemp('hybrid')}", "trace.enabled=false",
        "actor.micro_batch_size=16",
    ])
    groups = build_role_groups(cfg)
    groups["actor"].init_model()
    import numpy as np
    batch = sft_batch(get_task("digit_shift"), build_tokenizer(), 16, np.random.default_rng(0), 4)
    groups["actor"].sft_update(batch)  # creates the Adam state that offloading must move
    yield groups["actor"]
    shutdown_groups(groups.values())


def _report(actor):
    return actor.memory_report()[0]


def test_rollout_mode_offloads_optimizer_and_rss_drops(actor):
    before = _report(actor)
    assert before["optimizer"] > 150 * MB  # Adam's two moments for ~25M fp32 params
    actor.to_rollout_mode()
    during = _report(actor)
    assert during["mode"] == "rollout" and during["optimizer"] == 0 and during["grads"] == 0
    freed = before["rss"] - during["rss"]
    assert freed >= 0.8 * before["optimizer"], (
        f"to_rollout_mode freed {freed / MB:.0f} MiB of RSS; optimizer state was {before['optimizer'] / MB:.0f} MiB")
    actor.to_train_mode()
    after = _report(actor)
    assert after["optimizer"] == before["optimizer"]
    # sleep(level=2) dropped the rollout weights; they come back with the next weight sync
    assert after["rollout_weights"] == 0
    assert after["rss"] - during["rss"] <= after["optimizer"] - 0.8 * before["rollout_weights"]


def test_weight_sync_reallocates_and_copies_actor_weights(actor):
    actor.to_rollout_mode()
    rep = _report(actor)
    # parameters plus the rotary-embedding buffers
    assert rep["params"] <= rep["rollout_weights"] < 1.01 * rep["params"]
    actor.to_train_mode()


def test_generate_needs_rollout_mode(actor):
    from reference_trainer.protocol import DataProto
    from reference_trainer.single_controller import RemoteCallError
    import torch

    prompts = DataProto.from_dict(tensors={"input_ids": torch.ones(2, 3, dtype=torch.long),
                                           "attention_mask": torch.ones(2, 3, dtype=torch.long)})
    with pytest.raises(RemoteCallError, match="needs rollout mode.*to_rollout_mode"):
        actor.generate_sequences(prompts)
