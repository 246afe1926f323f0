"""rldbg's profilers on a real GPU: torch.profiler around a call records CUDA kernels, and the merge
puts them on the rank's "torch stream" track inside the call's window on rldbg's clock; the
opt-in CUDA allocator snapshot around a transition is written and holds the allocation made in
it. Skipped where CUDA is absent (CI here); run on a GPU machine with `pytest -m gpu` (torch and
msgpack, not Ray)."""
from __future__ import annotations

import pickle
import time

import pytest
import torch

from rldbg.profilers import cuda_mem
from rldbg.profilers.merge import merge_torch_traces
from rldbg.profilers.torch_prof import profile_call

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MB = 1 << 20


def _us_ns(text: str) -> int:
    return int(text.replace(".", ""))


def test_cuda_kernels_land_on_the_ranks_stream_track_inside_the_call(tmp_path, monkeypatch):
    monkeypatch.setenv("RLDBG_PROFILE", f"roles=actor;ranks=0;dir={tmp_path / 'prof'}")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    x = torch.randn(256, 1024, device="cuda")
    model(x).sum().item()   # warm-up outside the profiled call
    origin = time.time_ns()
    t0 = time.time_ns()
    with profile_call("actor", 0, "update_actor", 3):
        for _ in range(5):
            model(x).sum().backward()
        torch.cuda.synchronize()
    t1 = time.time_ns()
    events = []
    stats = merge_torch_traces(str(tmp_path / "prof"), events.append,
                               lambda role, rank: (2, rank + 1) if role == "actor" else None, origin)
    assert stats["traces"] == 1 and stats["skipped"] == 0
    streams = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and "stream" in e["args"]["name"]}
    assert streams and all(name.startswith("rank 0 torch stream") for name in streams.values())
    kernels = [e for e in events if e["ph"] == "X" and e.get("cat") == "torch.kernel"]
    assert len(kernels) >= 10 and {e["tid"] for e in kernels} <= set(streams)
    assert any("gemm" in e["name"].lower() or "sm90" in e["name"].lower() for e in kernels)
    slack = 5_000_000   # the GPU's clock against ours: within 5 ms
    for e in kernels:
        start = origin + _us_ns(e["ts"])
        assert t0 - slack <= start <= t1 + slack and e["args"]["step"] == 3 and e["args"]["role"] == "actor"
    ops = [e for e in events if e["ph"] == "X" and e.get("tid") == 1 and e["name"].startswith("aten::")]
    assert ops and all(t0 - slack <= origin + _us_ns(e["ts"]) <= t1 + slack for e in ops)


def test_a_cuda_memory_snapshot_holds_the_allocation_made_in_the_transition(tmp_path, monkeypatch):
    monkeypatch.setenv(cuda_mem.ENV, str(tmp_path / "snap"))
    with cuda_mem.snapshot_transition("offload_optimizer", "actor", 0):
        held = torch.empty(64 * MB, dtype=torch.uint8, device="cuda")
        held.fill_(3)
    files = sorted((tmp_path / "snap").rglob("*.pickle"))
    assert [f.parent.name for f in files] == ["actor_rank0"] and "offload_optimizer" in files[0].name
    with open(files[0], "rb") as f:
        snap = pickle.load(f)
    allocs = [e for trace in snap["device_traces"] for e in trace if e.get("action") == "alloc"]
    assert any(e["size"] >= 64 * MB for e in allocs)
    assert sum(s["allocated_size"] for s in snap["segments"]) >= 64 * MB
    torch.cuda.memory._record_memory_history(enabled=None)
