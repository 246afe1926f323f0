import os
import pickle
import warnings

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402

from reference_trainer.protocol import DataProto, reduce_metrics  # noqa: E402


def make(n=5, meta=None):
    return DataProto.from_dict(
        tensors={"ids": torch.arange(n * 3).view(n, 3), "logp": torch.arange(n, dtype=torch.float32) / 10},
        non_tensors={"uid": [f"u{i}" for i in range(n)], "score": np.arange(n, dtype=np.float64)},
        meta=meta if meta is not None else {"temperature": 1.0},
    )


def assert_same(a: DataProto, b: DataProto):
    assert a.tensors.keys() == b.tensors.keys() and a.non_tensors.keys() == b.non_tensors.keys()
    for k in a.tensors:
        assert a.tensors[k].dtype == b.tensors[k].dtype and torch.equal(a.tensors[k], b.tensors[k]), k
    for k in a.non_tensors:
        x, y = a.non_tensors[k], b.non_tensors[k]
        assert x.dtype == y.dtype and np.array_equal(x, y), k
    assert a.meta == b.meta


# ---- construction ----------------------------------------------------------------------------------

def test_construction_validates_row_counts_and_converts_lists():
    with pytest.raises(ValueError, match=r"tensor 'a' has 4 rows but tensor 'b' has 3"):
        DataProto.from_dict({"a": torch.zeros(4, 2), "b": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"tensor 'a' has 4 rows but non_tensor 'u' has 2"):
        DataProto.from_dict({"a": torch.zeros(4)}, {"u": ["x", "y"]})
    with pytest.raises(ValueError, match="0-d"):
        DataProto.from_dict({"a": torch.tensor(1.0)})
    with pytest.raises(ValueError, match="must be 1-D"):
        DataProto.from_dict(non_tensors={"u": np.zeros((2, 2))})
    with pytest.raises(TypeError, match="'a' is list"):
        DataProto.from_dict({"a": [1, 2]})
    with pytest.raises(ValueError, match="metrics"):
        DataProto.from_dict({"a": torch.zeros(2)}, meta={"metrics": {"loss": 1.0}})
    # Lists of equal-length lists must stay one object per row, not become a 2-D array.
    d = DataProto.from_dict(non_tensors={"toks": [[1, 2], [3, 4]]})
    assert d.non_tensors["toks"].dtype == object and d.non_tensors["toks"].shape == (2,)
    assert d.non_tensors["toks"][1] == [3, 4]
    assert len(DataProto()) == 0 and DataProto().keys() == []


def test_getitem_len_keys_repr():
    d = make()
    assert len(d) == 5 and d.keys() == ["ids", "logp", "uid", "score"] and "uid" in d
    assert torch.equal(d[-1]["ids"], torch.tensor([[12, 13, 14]]))
    assert list(d[1:4:2]["uid"]) == ["u1", "u3"]
    assert list(d[::-1]["uid"]) == ["u4", "u3", "u2", "u1", "u0"]
    assert list(d[torch.tensor([True, False, True, False, False])]["uid"]) == ["u0", "u2"]
    assert list(d[[4, 0]]["uid"]) == ["u4", "u0"] and list(d[np.array([-1])]["uid"]) == ["u4"]
    assert torch.equal(d[torch.tensor([3, 3])]["ids"], torch.tensor([[9, 10, 11]] * 2))
    assert len(d[[]]) == 0
    with pytest.raises(IndexError, match="index 5 out of range for 5 rows"):
        d[5]
    with pytest.raises(IndexError, match="mask has 2 entries for 5 rows"):
        d[[True, False]]
    with pytest.raises(KeyError, match="available"):
        d["nope"]
    assert repr(d) == ("DataProto(rows=5, {ids: int64[5, 3], logp: float32[5], uid: object[5], score: float64[5]}, "
                       "meta=['temperature'])")
    assert repr(d.pad_to_divisor(2)[0]).startswith("DataProto(rows=6, pad=1, {")


# ---- select / pop / union --------------------------------------------------------------------------

def test_select_shares_storage_and_names_missing_keys():
    d = make()
    s = d.select(["ids"], ["uid"], ["temperature"])
    assert s.keys() == ["ids", "uid"] and s.meta == {"temperature": 1.0}
    s.tensors["ids"][0, 0] = 99
    assert d.tensors["ids"][0, 0] == 99  # no copy
    with pytest.raises(KeyError, match=r"no tensor \['zzz'\]; available: \['ids', 'logp'\]"):
        d.select(["zzz"])
    assert d.select(non_tensor_keys=[]).keys() == ["ids", "logp"]


def test_pop_removes_and_returns():
    d = make().add_metrics({"x": 1.0})
    p = d.pop(["logp"], ["score"])
    assert p.keys() == ["logp", "score"] and d.keys() == ["ids", "uid"]
    assert "metrics" not in p.meta and d.meta["metrics"] == {"x": [1.0]}
    with pytest.raises(KeyError, match="no non_tensor"):
        d.pop(non_tensor_keys=["score"])


def test_union_merges_and_rejects_conflicts():
    d = make().add_metrics({"loss": 1.0})
    other = DataProto.from_dict({"ids": d.tensors["ids"].clone(), "adv": torch.ones(5)},
                                {"uid": list(d.non_tensors["uid"])},
                                {"temperature": 1.0, "step": 3, "metrics": {"loss": [2.0], "kl": [0.1]}})
    assert d.union(other) is d
    assert d.keys() == ["ids", "logp", "adv", "uid", "score"] and d.meta["step"] == 3
    assert d.meta["metrics"] == {"loss": [1.0, 2.0], "kl": [0.1]}
    with pytest.raises(ValueError, match="tensor 'ids' differs"):
        make().union(DataProto.from_dict({"ids": torch.zeros(5, 3, dtype=torch.int64)}))
    with pytest.raises(ValueError, match="tensor 'logp' differs"):  # same values, other dtype
        make().union(DataProto.from_dict({"logp": make().tensors["logp"].double()}))
    with pytest.raises(ValueError, match="non_tensor 'uid' differs"):
        make().union(DataProto.from_dict(non_tensors={"uid": list("abcde")}))
    with pytest.raises(ValueError, match="meta 'temperature' differs"):
        make().union(DataProto.from_dict(meta={"temperature": 0.7}))
    with pytest.raises(ValueError, match="row counts differ: 5 vs 4"):
        make().union(make(4))


# ---- chunk / split / concat / repeat ---------------------------------------------------------------

def test_chunk_concat_round_trip_and_errors():
    d = make(6).add_metrics({"loss": [1.0, 2.0]})
    parts = d.chunk(3)
    assert [len(p) for p in parts] == [2, 2, 2]
    assert "metrics" in parts[0].meta and all("metrics" not in p.meta for p in parts[1:])
    assert_same(DataProto.concat(parts), d)
    assert [len(p) for p in d.split([1, 0, 5])] == [1, 0, 5]
    with pytest.raises(ValueError, match=r"5 rows do not split into 2 equal chunks; call pad_to_divisor\(2\) first"):
        make(5).chunk(2)
    with pytest.raises(ValueError, match=r"sizes \[1, 2\] must be >= 0 and sum to 5"):
        make(5).split([1, 2])
    with pytest.raises(ValueError, match="part 1 has keys"):
        DataProto.concat([make(2), make(2).select(["ids"])])
    with pytest.raises(ValueError, match="tensor 'ids' does not concatenate"):
        wide = make(2)
        wide.tensors["ids"] = torch.zeros(2, 4, dtype=torch.int64)
        DataProto.concat([make(2), wide])
    with pytest.raises(ValueError, match="no parts"):
        DataProto.concat([])


def test_concat_joins_metrics_and_takes_meta_from_first():
    a = make(2, {"step": 1}).add_metrics({"loss": 1.0, "n/sum": 2})
    b = make(2, {"step": 2}).add_metrics({"loss": [3.0, 5.0]})
    out = DataProto.concat([a, b])
    assert out.meta == {"step": 1, "metrics": {"loss": [1.0, 3.0, 5.0], "n/sum": [2.0]}}
    assert reduce_metrics(out.meta["metrics"]) == {"loss": 3.0, "n/sum": 2.0}


def test_repeat_interleave_vs_tiled():
    d = make(3)
    assert list(d.repeat(2)["uid"]) == ["u0", "u0", "u1", "u1", "u2", "u2"]
    assert list(d.repeat(2, interleave=False)["uid"]) == ["u0", "u1", "u2", "u0", "u1", "u2"]
    assert torch.equal(d.repeat(2)["ids"], d["ids"].repeat_interleave(2, dim=0))
    assert torch.equal(d.repeat(2, interleave=False)["ids"], d["ids"].repeat(2, 1))
    with pytest.raises(ValueError, match="times=0"):
        d.repeat(0)


# ---- padding ---------------------------------------------------------------------------------------

def test_pad_5_to_2_gives_chunks_of_3_with_own_padding():
    d = make(5)
    padded, pad = d.pad_to_divisor(2)
    assert pad == 1 and len(padded) == 6 and padded.meta["num_pad_rows"] == 1
    assert list(padded["uid"]) == ["u0", "u1", "u2", "u3", "u4", "u0"]  # copies taken from the start
    c0, c1 = padded.chunk(2)
    assert [c0.meta["num_pad_rows"], c1.meta["num_pad_rows"]] == [0, 1]
    assert c0.valid_mask().tolist() == [True, True, True] and c1.valid_mask().tolist() == [True, True, False]
    assert_same(DataProto.concat([c0, c1]).unpad(pad), d)
    assert "num_pad_rows" not in d.meta  # the original is untouched


def test_pad_wraps_and_spreads_over_many_chunks():
    padded, pad = make(5).pad_to_divisor(4)
    assert pad == 3 and [c.num_pad_rows for c in padded.chunk(4)] == [0, 0, 1, 2]
    assert padded.valid_mask().tolist() == [True] * 5 + [False] * 3
    small, pad = make(2).pad_to_divisor(5)
    assert pad == 3 and list(small["uid"]) == ["u0", "u1", "u0", "u1", "u0"]
    assert [c.num_pad_rows for c in small.chunk(5)] == [0, 0, 1, 1, 1]
    assert_same(DataProto.concat(small.chunk(5)).unpad(3), make(2))
    even, pad = make(4).pad_to_divisor(2)
    assert pad == 0 and even.num_pad_rows == 0 and even.valid_mask().all()


def test_padding_rows_contribute_nothing_to_a_loss():
    d = make(5)
    padded, _ = d.pad_to_divisor(4)
    per_row = padded["logp"] * 3.0
    mask = padded.valid_mask()
    assert torch.equal((per_row * mask).sum() / mask.sum(), (d["logp"] * 3.0).mean())


def test_padding_errors():
    padded, pad = make(5).pad_to_divisor(2)
    with pytest.raises(ValueError, match="pad_size=2 but only 1 trailing rows are padding"):
        padded.unpad(2)
    with pytest.raises(ValueError, match="padding must stay trailing"):
        padded[[5, 0]]
    with pytest.raises(ValueError, match="padding must stay trailing"):
        padded.repeat(2, interleave=False)
    assert padded.repeat(2).num_pad_rows == 2
    c0, c1 = padded.chunk(2)
    with pytest.raises(ValueError, match="part 1 has real rows after padding"):
        DataProto.concat([c1, c0])
    with pytest.raises(ValueError, match="divisor=0"):
        make().pad_to_divisor(0)


def test_padding_twice_keeps_all_padding_trailing():
    once, p1 = make(5).pad_to_divisor(2)
    twice, p2 = once.pad_to_divisor(4)
    assert (p1, p2, twice.num_pad_rows) == (1, 2, 3)
    assert_same(twice.unpad(p2).unpad(p1), make(5))


def test_to_and_contiguous_work_in_place():
    d = DataProto.from_dict({"t": torch.arange(12.0).view(3, 4).t()}, {"s": np.arange(8)[::2]})
    assert d.contiguous() is d and d["t"].is_contiguous() and d["s"].flags.c_contiguous
    assert d.to("cpu") is d and d["t"].device.type == "cpu"
    with pytest.raises(KeyError, match="no meta key"):
        d.select(meta_keys=["step"])


# ---- metrics and describe --------------------------------------------------------------------------

def test_add_metrics_and_reduce_metrics():
    d = make().add_metrics({"loss": 1.0, "grad_norm/max": torch.tensor(3.0)}).add_metrics({"loss": [2.0, 6.0]})
    assert d.meta["metrics"] == {"loss": [1.0, 2.0, 6.0], "grad_norm/max": [3.0]}
    got = reduce_metrics({"loss": [1.0, 2.0, 6.0], "len/max": [3, 9, 1], "len/min": [3, 9, 1], "tok/sum": [1, 2, 3]})
    assert got == {"loss": 3.0, "len/max": 9.0, "len/min": 1.0, "tok/sum": 6.0}
    with pytest.raises(ValueError, match="'loss' has non-numeric value 'high'"):
        d.add_metrics({"loss": "high"})
    with pytest.raises(ValueError, match="'x' has no values"):
        reduce_metrics({"x": []})


def test_describe_and_nbytes():
    d = make()
    rows = d.describe()
    assert rows[0] == {"key": "ids", "kind": "tensor", "shape": (5, 3), "dtype": "int64", "nbytes": 120}
    assert rows[3] == {"key": "score", "kind": "non_tensor", "shape": (5,), "dtype": "float64", "nbytes": 40}
    assert d.nbytes == sum(r["nbytes"] for r in rows)


# ---- serialization ---------------------------------------------------------------------------------

def rich_batch():
    d = make(4, {"step": 7}).add_metrics({"loss": 0.5})
    d.tensors["bf16"] = torch.linspace(-2, 2, 12).view(4, 3).bfloat16()
    d.tensors["f8"] = torch.linspace(-1, 1, 4).to(torch.float8_e4m3fn)
    d.tensors["mask"] = torch.tensor([True, False, True, True])
    d.tensors["strided"] = torch.arange(16.0).view(4, 4).t()  # non-contiguous
    d.tensors["conj"] = (torch.arange(4.0) * (1 + 2j)).conj()  # lazy conjugate bit, which numpy() refuses
    d.non_tensors["obj"] = np.array([{"a": 1}, None, [1, 2], "s"], dtype=object)
    return d


def test_plain_pickle_round_trip_sends_tensors_out_of_band():
    d = rich_batch()
    buffers = []
    data = pickle.dumps(d, protocol=5, buffer_callback=buffers.append)
    assert sum(memoryview(b).nbytes for b in buffers) >= d["ids"].nbytes + d["bf16"].numel() * 2
    back = pickle.loads(data, buffers=buffers)
    assert_same(back, d)
    for proto in (2, 4, 5):
        assert_same(pickle.loads(pickle.dumps(d, protocol=proto)), d)


def test_pickle_falls_back_for_tensors_needing_torch():
    w = torch.ones(2, 3, requires_grad=True)
    back = pickle.loads(pickle.dumps(DataProto.from_dict({"w": w})))
    assert back["w"].requires_grad and torch.equal(back["w"].detach(), w.detach())


@ray.remote(num_cpus=0)
class Holder:
    def echo(self, batch):
        return batch

    def modify_stored(self, refs):
        # Deserialize inside the call so warnings raised by the rebuild are caught here.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batch = ray.get(refs[0])
        batch["ids"].add_(1000)
        batch["bf16"].mul_(2)
        batch["score"][:] = -1.0
        return [str(w.message) for w in caught], batch


def test_ray_put_get_and_actor_echo(ray_cluster):
    d = rich_batch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = ray.get(ray.put(d))
    assert [str(w.message) for w in caught] == []
    assert_same(got, d)
    got["ids"][0, 0] = -5  # writable, and the copy does not alias the stored object
    got["score"][0] = -5.0
    assert_same(ray.get(ray.put(d)), d)

    echoed = ray.get(Holder.remote().echo.remote(d))
    assert_same(echoed, d)
    chunks = ray.get([Holder.remote().echo.remote(c) for c in d.pad_to_divisor(3)[0].chunk(3)])
    assert [c.num_pad_rows for c in chunks] == [0, 0, 2]
    assert_same(DataProto.concat(chunks).unpad(2), d)


def test_in_place_modification_after_arrival_leaves_object_store_intact(ray_cluster):
    d = rich_batch()
    d.tensors["big"] = torch.zeros(4, 64 * 1024)  # 1 MiB: stored in shared memory, not inlined
    ref = ray.put(d)
    warned, modified = ray.get(Holder.remote().modify_stored.remote([ref]))
    assert not any("not writable" in m for m in warned), warned
    assert torch.equal(modified["ids"], d["ids"] + 1000)
    assert torch.equal(modified["bf16"], d["bf16"] * 2) and (modified["score"] == -1.0).all()
    assert_same(ray.get(ref), d)


@pytest.mark.parametrize("part_bytes", [1, 7, 4096, 1 << 20])
def test_to_parts_from_parts_round_trip(part_bytes):
    """Any cut size gives back every column bit for bit, in order, each tensor writable in its own
    storage even when the parts arrive read-only (as Ray hands them out)."""
    batch = DataProto.from_dict(
        tensors={"f": torch.randn(6, 5), "h": torch.randn(6, 3).bfloat16(), "b": torch.rand(6) > 0.5,
                 "e": torch.zeros(6, 0), "g": torch.ones(6, 2, requires_grad=True), "c": torch.randn(6, 2)[:, 1]},
        non_tensors={"s": [f"r{i}" for i in range(6)]}, meta={"k": 1, "metrics": {"m": [1.0]}})
    head, parts = batch.to_parts(part_bytes)
    assert all(p.nbytes <= part_bytes for p in parts)
    assert sum(p.nbytes for p in parts) == batch.tensor_nbytes - 6 * 2 * 4   # "g" needs grad: in the head
    for p in parts:
        p.flags.writeable = False
    out = DataProto.from_parts(head, parts)
    assert list(out.tensors) == list(batch.tensors) and list(out.non_tensors["s"]) == list(batch.non_tensors["s"])
    assert out.meta == batch.meta
    for k, t in batch.tensors.items():
        assert out.tensors[k].dtype == t.dtype and torch.equal(out.tensors[k], t), k
    plain = [out.tensors[k] for k in ("f", "b", "c")]
    assert all(t.numpy().flags.writeable for t in plain)
    assert len({t.untyped_storage().data_ptr() for t in plain}) == 3


def test_to_parts_rejects_bad_part_size():
    with pytest.raises(ValueError, match="part_bytes=0"):
        DataProto.from_dict(tensors={"x": torch.zeros(2)}).to_parts(0)
