"""Driver-side advantage estimation: scores (+ optional KL penalty) → token rewards →
GRPO group-normalised or GAE advantages."""
from __future__ import annotations

import torch

from reference_trainer import algos
from reference_trainer.protocol import DataProto


def compute_advantages(batch: DataProto, cfg) -> DataProto:
    t = batch.tensors
    mask, scores = t["response_mask"], t["scores"]
    metrics = {}
    if "old_log_probs" in t and "ref_log_probs" in t:  # otherwise update_actor reports the KL from its own forward pass
        kl = algos.kl_estimate(t["old_log_probs"], t["ref_log_probs"], cfg.kl_type)
        metrics["kl_to_ref"] = float(algos.masked_mean(kl, mask))
    if cfg.kl_in_reward:
        token_rewards, _ = algos.apply_kl_penalty(scores, t["old_log_probs"], t["ref_log_probs"], mask,
                                                  cfg.kl_coef, cfg.kl_type)
    else:
        token_rewards = torch.zeros_like(mask)
        last = (mask.sum(-1).long() - 1).clamp(min=0)
        token_rewards[torch.arange(len(mask)), last] = scores
    if cfg.adv_estimator == "grpo":
        adv, ret = algos.compute_grpo_advantages(token_rewards.sum(-1), batch.non_tensors["uid"], mask)
    else:
        adv, ret = algos.compute_gae(token_rewards, t["values"], mask, cfg.gamma, cfg.lam)
        if cfg.whiten_advantages:
            adv = algos.masked_whiten(adv, mask)
    batch.tensors["token_rewards"] = token_rewards
    batch.tensors["advantages"] = adv
    batch.tensors["returns"] = ret
    batch.add_metrics(metrics)
    return batch
