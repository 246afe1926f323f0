"""The host offload target (reference_trainer/workers/offload.py) and rldbg's CUDA memory probes
on a real GPU: the optimizer's state leaves the device for pinned host memory and comes back
unchanged, training with it offloaded every step gives the same weights as training without,
and the probes see device memory taken and given back. Skipped where CUDA is absent (CI here);
run on a GPU machine with `pytest -m gpu` (bench/gpu_check.sh does, under the suite's Ray conftest)."""
from __future__ import annotations

import copy

import pytest
import torch

from reference_trainer.workers.offload import Offloader, resolve_target
from reference_trainer.workers.train_ops import optimizer_tensors

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MB = 1 << 20
CUDA = torch.device("cuda")


def _probes():
    from rldbg.memory import probes

    return probes


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.Tanh(), torch.nn.Linear(4096, 1024)).to(CUDA)


def _step(model, opt, seed: int) -> None:
    g = torch.Generator(device=CUDA).manual_seed(seed)
    x = torch.randn(64, 1024, generator=g, device=CUDA)
    opt.zero_grad(set_to_none=True)
    model(x).pow(2).mean().backward()
    opt.step()


def test_auto_picks_host_on_a_gpu_run():
    assert resolve_target("auto", "cuda") == "host"


def test_training_with_the_state_offloaded_to_host_every_step_matches_training_without(tmp_path):
    plain = _model()
    moved = copy.deepcopy(plain)
    opt_plain = torch.optim.AdamW(plain.parameters(), lr=1e-3)
    opt_moved = torch.optim.AdamW(moved.parameters(), lr=1e-3)
    off = Offloader("host", tmp_path, CUDA)
    for step in range(5):
        _step(plain, opt_plain, step)
        _step(moved, opt_moved, step)
        state = optimizer_tensors(opt_moved)
        assert state and all(t.is_cuda for t in state)
        before = torch.cuda.memory_allocated()
        assert off.offload("optimizer", state) == sum(t.numel() * t.element_size() for t in state)
        assert all(t.device.type == "cpu" and t.is_pinned() for t in state)
        freed = before - torch.cuda.memory_allocated()
        assert freed >= 0.99 * sum(t.numel() * t.element_size() for t in state), freed
        assert off.reload("optimizer") > 0
        assert all(t.is_cuda for t in state) and not off.is_offloaded("optimizer")
    for a, b in zip(plain.parameters(), moved.parameters()):
        assert torch.equal(a, b)


def test_the_probes_see_device_memory_taken_and_given_back():
    """sample() (every call's edges) reads the allocator only; sample_full() (a transition's edges,
    the sampler) adds what the device says: the whole GPU's used bytes."""
    probes = _probes()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = probes.sample_full()
    assert {"rss", "cuda_allocated", "cuda_reserved", "device_used"} <= set(base)
    assert "device_used" not in probes.sample() and "cuda_reserved" in probes.sample()
    x = torch.empty(512 * MB, dtype=torch.uint8, device=CUDA)
    x.fill_(1)
    torch.cuda.synchronize()
    held = probes.sample_full()
    assert held["cuda_allocated"] - base["cuda_allocated"] >= 512 * MB
    assert held["device_used"] - base["device_used"] >= 500 * MB
    del x
    held_cached = probes.sample_full()
    assert held_cached["cuda_reserved"] - base["cuda_reserved"] >= 500 * MB   # freed, still cached
    torch.cuda.empty_cache()
    after = probes.sample_full()
    assert after["cuda_allocated"] <= base["cuda_allocated"]
    assert held["device_used"] - after["device_used"] >= 500 * MB
