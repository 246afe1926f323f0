"""Data-parallel updates give the single-process full-batch step: two gloo ranks holding an
uneven split (3 and 2 rows, different token counts) end with the weights one process gets
from all 5 rows, for every loss aggregation mode."""
from __future__ import annotations

import multiprocessing as mp
import os
import socket

import pytest
import torch
import torch.distributed as dist

from reference_trainer import algos
from reference_trainer.protocol import DataProto
from reference_trainer.workers import train_ops as ops


def _problem():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 1))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 10, (5, 4), generator=g)
    mask = (torch.rand(5, 4, generator=g) > 0.3).float()
    mask[0] = torch.tensor([1.0, 0, 0, 0])  # a row with one token: counts differ a lot between ranks
    return model, DataProto.from_dict(tensors={"ids": ids, "response_mask": mask, "w": torch.randn(5, 4, generator=g)})


def _step(rank: int, world: int, mode: str, port: int, out) -> None:
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    model, batch = _problem()
    if world > 1:
        batch = batch.split([3, 2])[rank]

    def loss_fn(micro, denom, n_ranks):
        x = model(micro.tensors["ids"]).squeeze(-1) * micro.tensors["w"]
        return algos.agg_loss(x ** 2, ops.loss_mask(micro), mode, denom, n_ranks), {}

    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    ops.minibatch_update(batch, model, opt, 5, 2, 1, 1e9, mode, loss_fn)
    out.put((rank, [p.detach().numpy().copy() for p in model.parameters()]))
    if world > 1:
        dist.destroy_process_group()


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_two_uneven_ranks_step_like_one_process(mode):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    _step(0, 1, mode, 0, q)
    single = q.get()[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=_step, args=(r, 2, mode, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert all(p.exitcode == 0 for p in procs)
    for rank, params in results:
        for got, want in zip(params, single):
            assert abs(got - want).max() < 1e-5, (mode, rank)
        assert any(abs(got - want0).max() > 1e-3 for got, want0 in zip(params, [p.detach().numpy() for p in _problem()[0].parameters()]))
