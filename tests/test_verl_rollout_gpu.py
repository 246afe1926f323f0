"""VeRL's rollout sleep/wake as rldbg transitions on a real GPU: the hybrid worker's
BaseRollout.resume(tags) / release() in a VeRL worker group on one GPU, judged by the device's
used bytes at each transition's edges; and, where vLLM is installed, the async rollout server's
methods wrapped as VeRL loads it. Skipped without CUDA (CI here); run on a GPU machine with
`pytest -m gpu tests/test_verl_rollout_gpu.py`. The CPU half is tests/test_verl_trace.py."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from verl_support import require_entry_point, teardown

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MiB = 1 << 20
HELD_MIB = 256


def test_rollout_sleep_gives_the_device_back_what_wake_took(ray_cluster, tmp_path):
    import ray
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    import rldbg.integrations.verl as rv
    import rldbg.trace
    from rldbg.trace.report import analyse_trace

    require_entry_point()
    rv.install()
    from verl_workers import ActorWorker

    path = str(tmp_path / "trace.json.gz")
    rldbg.trace.start(path)
    pool = RayResourcePool([1], use_gpu=True, max_colocate_count=1)
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(ActorWorker)), name_prefix="actor_rollout")
    try:
        assert wg.rollout_cycle(HELD_MIB, "cuda") == [0]
    finally:
        rldbg.trace.stop()
        teardown(wg)
    _, t = analyse_trace(path)
    rollout = sorted((x for x in t.transitions if x["name"].startswith("rollout_")), key=lambda x: x["ts"])
    assert [(x["name"], x["role"], x["rank"]) for x in rollout] == [
        ("rollout_wake", "actor_rollout", 0), ("rollout_wake", "actor_rollout", 0), ("rollout_sleep", "actor_rollout", 0)]
    weights, kv, sleep = (x["args"] for x in rollout)
    # On a GPU the edges carry the device's used bytes (NVML): what the process took and gave back.
    assert weights["mem_after"] - weights["mem_before"] >= 0.9 * HELD_MIB * MiB, weights
    assert kv["mem_after"] - kv["mem_before"] >= 0.9 * HELD_MIB * MiB, kv
    assert sleep["mem_before"] - sleep["mem_after"] >= 0.9 * 2 * HELD_MIB * MiB, sleep


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm")
def test_vllm_rollout_server_sleeps_and_wakes_as_transitions():
    import rldbg.integrations.verl as rv

    rv.install()
    from verl.workers.rollout.vllm_rollout import vllm_async_server as mod

    for method in ("wake_up", "sleep", "release_kv_cache", "resume_kv_cache"):
        assert getattr(getattr(mod.vLLMHttpServer, method), "__rldbg_verl__", False), method
    from verl.workers.rollout.vllm_rollout.vllm_rollout import ServerAdapter

    assert getattr(ServerAdapter.resume, "__rldbg_verl__", False) and getattr(ServerAdapter.release, "__rldbg_verl__", False)
