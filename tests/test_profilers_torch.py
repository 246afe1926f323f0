"""torch.profiler per role/rank/step: TensorBoard's plugin shows one worker per rank, and the
operators merge into rldbg's trace nested inside the matching call span."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from rldbg.profilers import spec as pspec
from rldbg.profilers import tensorboard as tb
from rldbg.profilers.merge import merge_torch_traces
from rldbg.profilers.torch_prof import profile_call
from polling import until


def test_spec_parse_and_errors():
    s = pspec.parse("roles=actor,critic;ranks=0,2-3;steps=2,3;dir=/tmp/p;run=demo")
    assert s.roles == {"actor", "critic"} and s.ranks == {0, 2, 3} and s.steps == {2, 3}
    assert s.selects("actor", 2, "update_actor", 3)
    assert not s.selects("actor", 1, "update_actor", 3)
    assert not s.selects("reward", 0, "compute", 2)
    assert not s.selects("actor", 0, "update_actor", None)
    assert pspec.parse(s.to_env()) == s
    assert pspec.to_env("/d", roles=["actor"], ranks=[0, 1]) == "dir=/d;run=rldbg;roles=actor;ranks=0,1"
    for bad, words in [("roles=actor", "dir= is required"), ("dir=/d;rank=0", "unknown key 'rank'"),
                       ("dir=/d;ranks=x", "bad ranks value 'x'"), ("dir=/d;steps=3-1", "bad steps value .3-1."),
                       ("dir=/d;roles=a b", "bad roles value"), ("dir=/d;oops", "bad item 'oops'")]:
        with pytest.raises(pspec.ProfileSpecError, match=words):
            pspec.parse(bad)


def test_not_selected_is_a_noop(tmp_path, monkeypatch):
    monkeypatch.setenv("RLDBG_PROFILE", f"roles=critic;dir={tmp_path}")
    with profile_call("actor", 0, "update_actor", 1):
        pass
    monkeypatch.delenv("RLDBG_PROFILE")
    with profile_call("critic", 0, "update_critic", 1):
        pass
    assert not list(tmp_path.iterdir())


def test_tensorboard_shows_one_worker_per_rank(ray_cluster, tmp_path):
    import ray
    from prof_workers import TinyRank

    env = pspec.to_env(str(tmp_path), roles=["actor"], steps=[1, 2], run="demo")
    ranks = [ray.remote(TinyRank).options(num_cpus=0).remote("actor", r, 2, env) for r in range(2)]
    try:
        ray.get([a.update.remote(s) for s in (0, 1, 2) for a in ranks])
    finally:
        for a in ranks:
            ray.kill(a)
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.pt.trace.json"))
    assert files == ["demo/update_actor/actor_rank0.000001.pt.trace.json",
                     "demo/update_actor/actor_rank0.000002.pt.trace.json",
                     "demo/update_actor/actor_rank1.000001.pt.trace.json",
                     "demo/update_actor/actor_rank1.000002.pt.trace.json"]
    proc, base = tb.start(str(tmp_path), port=0)
    try:
        tb.wait_ready(proc, base)
        def loaded():
            body = tb.get_json(f"{base}{tb.PLUGIN_API}/runs")
            return not body.get("loading") and "demo/update_actor" in body["runs"] and body["runs"]

        assert until(loaded, "the plugin loads run demo/update_actor", limit=90, interval=1.0) == ["demo/update_actor"]
        workers = tb.get_json(f"{base}{tb.PLUGIN_API}/workers?run=demo/update_actor&view=Overview")
        assert sorted(workers) == ["actor_rank0", "actor_rank1"]
        q = "run=demo/update_actor&worker=actor_rank1"
        assert tb.get_json(f"{base}{tb.PLUGIN_API}/spans?{q}") == ["1", "2"]
        ops = tb.get_json(f"{base}{tb.PLUGIN_API}/operation/table?{q}&span=1&view=Operator&group_by=Operation")
        names = {row["name"] for row in ops["data"]}
        assert {"aten::addmm", "aten::mm"} <= names
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_operators_nest_inside_call_span(tmp_path, monkeypatch):
    import torch
    from trace_processor import TraceProcessor

    monkeypatch.setenv("RLDBG_PROFILE", f"roles=actor;ranks=1;dir={tmp_path / 'prof'}")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    origin = time.time_ns()
    calls = []
    for step in (1, 2):
        t0 = time.time_ns()
        with profile_call("actor", 1, "compute_log_prob", step):
            model(torch.randn(8, 16)).softmax(-1).sum()
        calls.append((step, t0, time.time_ns()))
    # A minimal rldbg-style trace: actor is pid 2, rank 1 is tid 2; the call spans on that track.
    events = [{"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "actor"}},
              {"ph": "M", "pid": 2, "tid": 2, "name": "thread_name", "args": {"name": "rank 1"}}]
    for step, t0, t1 in calls:
        events.append({"ph": "X", "pid": 2, "tid": 2, "cat": "call", "name": "compute_log_prob",
                       "ts": f"{(t0 - origin) / 1000:.3f}", "dur": f"{(t1 - t0) / 1000:.3f}",
                       "args": {"step": step}})
    stats = merge_torch_traces(str(tmp_path / "prof"), events.append,
                               lambda role, rank: (2, rank + 1) if role == "actor" else None, origin)
    assert stats["traces"] == 2 and stats["skipped"] == 0
    out = tmp_path / "trace.json"
    out.write_text(json.dumps(events))
    with TraceProcessor(str(out)) as tp:   # one trace processor for all queries (it is slow to start)
        rows, total, per_call = _nesting_queries(tp)
    assert len(rows) >= 10 and all(r["call"] == "compute_log_prob" and r["call_depth"] == 0 for r in rows)
    assert total == len(rows)   # every operator slice survived import and sits inside a call
    assert len(per_call) == 2   # each step's operators inside that step's call span


def _nesting_queries(tp):
    rows = tp.query("""
        select s.name as op, c.name as call, c.depth as call_depth
        from slice s join ancestor_slice(s.id) c on c.category = 'call'
        where s.name like 'aten::%'""")
    total = tp.query("select count(*) as n from slice where name like 'aten::%'")[0]["n"]
    per_call = tp.query("""
        select c.id, count(*) as n from slice s join ancestor_slice(s.id) c on c.category = 'call'
        where s.name like 'aten::addmm' group by c.id""")
    return rows, total, per_call


def test_cuda_memory_snapshot_is_a_noop_with_one_notice_on_cpu(tmp_path, monkeypatch, capfd):
    import torch
    from rldbg.profilers import cuda_mem

    if torch.cuda.is_available():
        pytest.skip("this checks the CPU path")
    with cuda_mem.snapshot_transition("offload_optimizer", "actor", 0):
        pass
    assert capfd.readouterr().err == ""          # unset: silent
    monkeypatch.setenv(cuda_mem.ENV, str(tmp_path / "snap"))
    monkeypatch.setitem(cuda_mem._state, "noticed", False)
    for name in ("offload_optimizer", "onload_optimizer"):
        with cuda_mem.snapshot_transition(name, "actor", 0):
            pass
    err = capfd.readouterr().err
    assert err.count("CUDA is not available") == 1 and cuda_mem.ENV in err
    assert not (tmp_path / "snap").exists()
