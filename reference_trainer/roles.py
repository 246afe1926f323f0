"""Placing roles on resource pools: the hybrid actor always gets the main pool; critic and
reward join it (colocated, one Ray actor per rank) or get pools of their own, by config."""
from __future__ import annotations

import uuid

from reference_trainer.runtime import cluster_has_gpu
from reference_trainer.single_controller import ResourcePool, spawn_role_groups
from reference_trainer.workers.critic import CriticWorker
from reference_trainer.workers.hybrid import ActorRolloutRefWorker
from reference_trainer.workers.reward import RewardWorker


def resolve_device(cfg) -> str:
    if cfg.resources.device == "auto":
        return "cuda" if cluster_has_gpu() else "cpu"
    if cfg.resources.device == "cuda" and not cluster_has_gpu():
        raise RuntimeError("resources.device=cuda but the Ray cluster has no GPU; use resources.device=cpu or auto")
    return cfg.resources.device


def build_role_groups(cfg, env: dict | None = None) -> dict:
    r = cfg.resources
    device = resolve_device(cfg)
    gpus = r.gpus_per_rank if device == "cuda" else 0.0
    run = f"rt-{uuid.uuid4().hex[:6]}"
    main: dict = {"actor": (ActorRolloutRefWorker, cfg)}
    own: dict[str, dict] = {}
    if cfg.algorithm.adv_estimator == "gae":
        (main if r.critic_pool == "shared" else own.setdefault("critic", {}))["critic"] = (CriticWorker, cfg)
    (main if r.reward_pool == "shared" else own.setdefault("reward", {}))["reward"] = (RewardWorker, cfg)

    common = dict(run_name=run, threads_per_rank=r.threads_per_rank, pg_timeout_s=cfg.debug.pg_timeout_s,
                  runtime_env={"env_vars": env} if env else None)
    groups = spawn_role_groups(ResourcePool("main", r.n_ranks, r.cpus_per_rank, gpus), main, **common)
    for name, roles in own.items():
        # A reward pool does no tensor work worth a GPU; the critic gets the same shape as the actor.
        pool = ResourcePool(name, r.n_ranks, r.cpus_per_rank, gpus if name == "critic" else 0.0)
        groups.update(spawn_role_groups(pool, roles, **common))
    return groups
