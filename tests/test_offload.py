"""The file offload target (reference_trainer/workers/offload.py) on real tensors in this process:
the optimizer's state leaves the process's RSS and comes back unchanged, training with it
offloaded every step gives the same weights as training without, and new storage is picked up."""
from __future__ import annotations

import copy
import os

import torch

from reference_trainer.workers.offload import Offloader, tune_allocator_for_offload
from reference_trainer.workers.train_ops import optimizer_tensors

MB = 1 << 20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Tanh(), torch.nn.Linear(512, 256))


def _step(model, opt, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(32, 256, generator=g)
    opt.zero_grad(set_to_none=True)
    model(x).pow(2).mean().backward()
    opt.step()


def test_training_with_the_state_offloaded_every_step_matches_training_without(tmp_path):
    plain = _model()
    moved = copy.deepcopy(plain)
    opt_plain = torch.optim.AdamW(plain.parameters(), lr=1e-2)
    opt_moved = torch.optim.AdamW(moved.parameters(), lr=1e-2)
    off = Offloader("file", tmp_path, torch.device("cpu"))
    for step in range(6):
        _step(plain, opt_plain, step)
        _step(moved, opt_moved, step)
        state = optimizer_tensors(opt_moved)
        size = sum(t.numel() * 4 for t in state)
        assert off.offload("optimizer", state) == size > 0
        assert all(t.numel() == 0 for t in state), "an offloaded tensor must not be usable"
        assert off.reload("optimizer") > 0
    for a, b in zip(plain.parameters(), moved.parameters()):
        assert torch.equal(a, b)
    for sa, sb in zip(opt_plain.state.values(), opt_moved.state.values()):
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    assert list(tmp_path.iterdir()) == [], "the backing file is unlinked once mapped"


def test_offload_drops_rss_and_reload_brings_the_same_bytes_back(tmp_path):
    tune_allocator_for_offload()
    group = [torch.randn(1024, 1024) for _ in range(16)]   # 64 MiB
    want = [t.clone() for t in group]
    off = Offloader("file", tmp_path, torch.device("cpu"))
    for round_ in range(3):   # the first offload copies into the file; the later ones only unmap
        before = _rss()
        off.offload("weights", group)
        during = _rss()
        assert before - during >= 0.8 * 64 * MB, f"round {round_}: RSS fell by {(before - during) / MB:.0f} MiB"
        off.reload("weights")
        assert _rss() - during >= 0.8 * 64 * MB
        assert all(torch.equal(t, w) for t, w in zip(group, want))
        for t, w in zip(group, want):   # written in place between offloads, as an optimizer step does
            t.add_(1.0)
            w.add_(1.0)


def test_tensors_given_new_storage_are_copied_again(tmp_path):
    group = [torch.zeros(1000), torch.zeros(10, 10)]
    off = Offloader("file", tmp_path, torch.device("cpu"))
    off.offload("g", group)
    off.reload("g")
    group[0].data = torch.full((1000,), 7.0)   # e.g. a checkpoint load replaced the state
    off.offload("g", group)
    off.reload("g")
    assert torch.equal(group[0], torch.full((1000,), 7.0)) and torch.equal(group[1], torch.zeros(10, 10))


def test_the_folders_an_offload_made_do_not_outlive_its_mapping(tmp_path):
    """RUN/offload/actor-rank0 holds nothing once the file is mapped and unlinked: not left behind
    empty; a folder that was there before (a user's offload.dir) stays."""
    off = Offloader("file", tmp_path / "offload" / "actor-rank0", torch.device("cpu"))
    t = [torch.ones(100)]
    off.offload("g", t)
    assert list(tmp_path.iterdir()) == []
    off.reload("g")
    t[0].data = torch.zeros(100)   # new storage: copied into a new file, the folders made again
    off.offload("g", t)
    off.reload("g")
    assert list(tmp_path.iterdir()) == [] and torch.equal(t[0], torch.zeros(100))
    # RUN/offload, there before either rank's first offload (another role made it): the last to leave removes it
    shared = tmp_path / "offload"
    ranks = [Offloader("file", shared / f"actor-rank{r}", torch.device("cpu"), shared=shared) for r in (0, 1)]
    shared.mkdir()
    for r, off in enumerate(ranks):
        off.offload("g", [torch.ones(10 + r)])
    assert list(tmp_path.iterdir()) == []
    given = tmp_path / "mine"   # offload.dir set by the user, made before the run
    given.mkdir()
    Offloader("file", given, torch.device("cpu")).offload("g", t)
    assert list(tmp_path.iterdir()) == [given] and list(given.iterdir()) == []


def test_an_empty_group_and_a_second_offload_are_no_ops(tmp_path):
    off = Offloader("file", tmp_path, torch.device("cpu"))
    assert off.offload("none", []) == 0 and off.reload("none") == 0
    t = [torch.ones(100)]
    assert off.offload("g", t) == 400
    assert off.offload("g", t) == 0    # already offloaded
    assert off.reload("g") == 400 and torch.equal(t[0], torch.ones(100))
    assert off.reload("g") == 0


def test_the_optimizer_state_listing_follows_the_first_step_and_a_state_load():
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    assert optimizer_tensors(opt) == []
    _step(model, opt, 0)
    moments = [t for entry in opt.state.values() for k, t in entry.items() if k != "step"]
    assert [id(t) for t in optimizer_tensors(opt)] == [id(t) for t in moments] and moments
    saved = copy.deepcopy(opt.state_dict())
    opt.load_state_dict(saved)   # new state tensors: the listing must name them, not the old ones
    fresh = [t for entry in opt.state.values() for k, t in entry.items() if k != "step"]
    assert [id(t) for t in optimizer_tensors(opt)] == [id(t) for t in fresh]
    assert not {id(t) for t in fresh} & {id(t) for t in moments}
