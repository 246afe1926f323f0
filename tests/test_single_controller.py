"""Every dispatch mode, uneven batches, colocation, naming and errors, on a real 2-rank group."""
from __future__ import annotations

import pytest
import ray
import torch

from reference_trainer.protocol import DataProto
from reference_trainer.single_controller import (
    CallFuture, RemoteCallError, ResourcePool, shutdown_groups, spawn_role_groups,
)
from sc_workers import EchoWorker, OtherWorker


@pytest.fixture(scope="module")
def groups(ray_cluster):
    gs = spawn_role_groups(ResourcePool("sc", 2, cpus_per_rank=0.5),
                           {"echo": (EchoWorker, None), "other": (OtherWorker, None)}, run_name="sctest")
    yield gs
    shutdown_groups(gs.values())


def test_one_to_all_knows_rank_world_and_master(groups):
    out = groups["echo"].whoami()
    assert [o["rank"] for o in out] == [0, 1]
    assert {o["world"] for o in out} == {2}
    assert out[0]["master"] == out[1]["master"] and out[0]["master"][0] == "127.0.0.1"


def test_all_to_all_and_dp_compute_take_one_entry_per_rank(groups):
    assert groups["echo"].square([3, 4]) == [9, 16]
    assert groups["echo"].add_rank([10, 10]) == [10, 11]
    with pytest.raises(TypeError, match="one entry per rank \\(2\\)"):
        groups["echo"].square([1, 2, 3])


def test_dp_compute_proto_pads_uneven_batch_and_unpads_result(groups):
    batch = DataProto.from_dict(tensors={"x": torch.arange(5.0)})
    out = groups["echo"].double(batch)
    assert len(out) == 5
    assert torch.equal(out.tensors["y"], torch.arange(5.0) * 2)
    # rank 0 got rows 0-2, rank 1 got rows 3-4 plus one padding row (dropped on collect)
    assert out.tensors["rank"].tolist() == [0, 0, 0, 1, 1]
    assert out.tensors["valid"].tolist() == [1, 1, 1, 1, 1]
    assert out.meta["metrics"]["rows_seen"] == [3.0, 3.0]


def _big_batch(rows: int) -> DataProto:
    """Over 300 KiB: several transport parts, with a bf16 column, non-tensors and metrics."""
    g = torch.Generator().manual_seed(1)
    batch = DataProto.from_dict(
        tensors={"ids": torch.randint(0, 1000, (rows, 600), generator=g),
                 "h": torch.randn(rows, 500, generator=g).bfloat16(),
                 "mask": torch.rand(rows, 300, generator=g) > 0.5},
        non_tensors={"text": [f"row {i}" for i in range(rows)]}, meta={"step": 7})
    return batch.add_metrics({"driver": 1.0})


@pytest.mark.parametrize("grow", [0, 200_000])
def test_dp_compute_proto_big_batch_travels_intact(groups, grow):
    """A batch cut into parts (transport) comes back bit for bit, uneven rows
    padded and unpadded; `grow` makes each rank's result outgrow the return slots sized from its input."""
    from reference_trainer.single_controller import transport

    batch = _big_batch(65)
    assert batch.tensor_nbytes > 3 * transport.PART_BYTES
    out = groups["echo"].tag_rows(batch, grow=grow)
    assert len(out) == 65 and list(out.non_tensors["text"]) == [f"row {i}" for i in range(65)]
    for k, t in batch.tensors.items():
        assert out.tensors[k].dtype == t.dtype and torch.equal(out.tensors[k], t), k
    assert out.tensors["rank"].tolist() == [0] * 33 + [1] * 32
    assert out.meta["step"] == 7 and out.meta["metrics"] == {"driver": [1.0], "rows_seen": [33.0, 33.0]}
    if grow:
        assert out.tensors["grown"].shape == (65, grow)
        assert torch.equal(out.tensors["grown"][33], (torch.arange(grow) % 251).to(torch.uint8))   # rank 1's row 0


def test_transport_cuts_mid_sized_batches_only():
    """Small batches are inline already and big ones move faster through the object store: only
    batches between one part and MAX_PARTS parts are cut, once per call however many ranks get them."""
    from reference_trainer.single_controller import transport

    def batch(nbytes):
        return DataProto.from_dict(tensors={"x": torch.zeros(4, nbytes // 4, dtype=torch.uint8)})

    small, mid, big = batch(transport.PART_BYTES), batch(3 * transport.PART_BYTES), \
        batch((transport.MAX_PARTS + 1) * transport.PART_BYTES)
    cache: dict = {}
    args, kwargs, parts, slots = transport.encode_call((small, mid), {"b": big}, cache)
    assert args[0] is small and kwargs["b"] is big and isinstance(args[1], transport.Wired)
    assert len(parts) == 3 and slots == 4 and all(p.nbytes <= transport.PART_BYTES for p in parts)
    again = transport.encode_call((mid,), {}, cache)[2]
    assert all(a is b for a, b in zip(again, parts))   # the second rank reuses the first's cut


def test_one_to_all_big_batch_and_rank_error(groups):
    batch = _big_batch(40)
    want = {k: float(t.double().sum()) for k, t in batch.tensors.items()}
    assert groups["echo"].checksum(batch) == [want, want]
    with pytest.raises(RemoteCallError, match="echo rank 1 failed in checksum.*bad batch on rank 1"):
        groups["echo"].checksum(batch, fail_rank=1)


def test_dp_compute_proto_rejects_non_proto(groups):
    with pytest.raises(TypeError, match="DataProto"):
        groups["echo"].double(torch.arange(4))


def test_rank_zero_runs_on_rank_zero_only(groups):
    before = groups["echo"].calls_per_rank()
    groups["echo"].double(DataProto.from_dict(tensors={"x": torch.zeros(4)}))
    assert groups["echo"].count_calls() == before[0] + 1
    assert isinstance(groups["echo"].count_calls(), int)


def test_non_blocking_call_returns_future(groups):
    fut = groups["echo"].slow_sum(1000)
    assert isinstance(fut, CallFuture)
    assert fut.get(timeout=60) == [499500, 499500]


def test_custom_dispatch_mode(groups):
    assert groups["echo"].identity(10.0) == 10.0


def test_process_group_is_initialised_with_gloo(groups):
    assert groups["echo"].all_reduce(1.5) == [3.0, 3.0]


def test_colocated_roles_share_a_process_per_rank(groups):
    echo = groups["echo"].whoami()
    other = groups["other"].whoami()
    assert [e["pid"] for e in echo] == [o["pid"] for o in other]
    assert echo[0]["pid"] != echo[1]["pid"]
    assert not hasattr(groups["other"], "square")


def test_actors_are_named_by_role_and_rank(groups, ray_cluster):
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert {"sctest:echo+other:rank0", "sctest:echo+other:rank1"} <= names
    from ray.util.state import list_actors

    reprs = {a.repr_name for a in list_actors(address=ray_cluster, filters=[("state", "=", "ALIVE")], detail=True)}
    assert {"echo+other[rank 0/2]", "echo+other[rank 1/2]"} <= reprs


def test_remote_error_names_role_rank_method_and_keeps_traceback(groups):
    with pytest.raises(RemoteCallError) as info:
        groups["echo"].fail_on(1)
    err = info.value
    assert (err.role, err.rank, err.method) == ("echo", 1, "fail_on")
    assert "echo rank 1 failed in fail_on: ValueError: boom on rank 1" in str(err)
    assert "sc_workers.py" in err.remote_traceback


def test_impossible_pool_fails_before_work(ray_cluster):
    with pytest.raises(RuntimeError, match="needs 2 × \\{'CPU': 64.0\\}.*resources.n_ranks"):
        ResourcePool("huge", 2, cpus_per_rank=64.0, ready_timeout_s=2).placement_group()


def test_a_rank_errors_headline_is_one_line():
    """python -m reference_trainer ends a failed run with it: a message of several lines gives its first."""
    many = RemoteCallError("actor", 1, "load_checkpoint", 3, "RuntimeError",
                           "Error(s) in loading state_dict:\n\tMissing", "Traceback ...")
    assert many.headline == ("actor rank 1 failed in load_checkpoint at step 3: RuntimeError: Error(s) in loading "
                             "state_dict: (more in the traceback)")
    assert "\tMissing" in str(many)
    one = RemoteCallError("critic", 0, "m", None, "ValueError", "bad", "tb")
    assert one.headline == "critic rank 0 failed in m: ValueError: bad"
