"""Colocated VeRL roles (several Workers in one Ray actor per rank), both of VeRL's ways
(create_colocated_worker_cls, which VeRL 0.9's trainer uses, and the fused variant), plus an
async worker and a program's own worker_env: each role gets its own process in the trace, named
by VeRL's role key, and VeRL's behaviour is unchanged."""
from __future__ import annotations

import ray
import pytest

from verl_support import batch, group, require_entry_point, teardown

import rldbg.trace  # noqa: E402
from trace_processor import TraceProcessor, stats_errors  # noqa: E402


def _colocated(make):
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl_workers import ActorWorker, CriticWorker

    roles = {"actor_rollout": RayClassWithInitArgs(cls=ray.remote(ActorWorker)),
             "critic": RayClassWithInitArgs(cls=ray.remote(CriticWorker))}
    wg = RayWorkerGroup(RayResourcePool([2], use_gpu=False, max_colocate_count=1), make(roles))
    return wg, wg.spawn(prefix_set=roles.keys())


@pytest.fixture(scope="module")
def run(ray_cluster, tmp_path_factory):
    require_entry_point()
    import rldbg.integrations.verl as rv

    rv.install()
    from verl.single_controller.ray.base import create_colocated_worker_cls, create_colocated_worker_cls_fused
    from verl_workers import AsyncWorker

    base_dir = tmp_path_factory.mktemp("verl_colo")
    seen, paths = {}, []
    # One trace per group, stopped before its actors are killed (a killed actor loses its last
    # unflushed events); the session cluster has CPUs for one 2-rank pool at a time here.
    for kind, make in (("dict", create_colocated_worker_cls), ("fused", create_colocated_worker_cls_fused)):
        paths.append(str(base_dir / f"{kind}.json.gz"))
        rldbg.trace.start(paths[-1], memory_hz=0)
        base, wgs = _colocated(make)
        try:
            d = batch()
            out = wgs["actor_rollout"].update_actor(d)
            seen[kind] = (out.batch["out"].tolist() == (d.batch["x"] * 2).tolist(),
                          wgs["critic"].compute_values(d).batch["values"].shape[0],
                          wgs["critic"].whoami(), ray.get(base.workers[1].__ray_call__.remote(lambda w: repr(w))))
        finally:
            rldbg.trace.stop()
            teardown(base)
    paths.append(str(base_dir / "async.json.gz"))
    rldbg.trace.start(paths[-1], memory_hz=0)
    aw = group(AsyncWorker, "async")
    try:
        seen["async"] = aw.ping(10)
    finally:
        rldbg.trace.stop()
        teardown(aw)
    return paths, seen


def test_verl_results_unchanged(run):
    _, seen = run
    for kind in ("dict", "fused"):
        doubled, rows, ranks, _ = seen[kind]
        assert doubled and rows == 8 and ranks == [0, 1], kind
    assert seen["async"] == [10, 11]


def test_colocated_actor_repr_names_its_roles(run):
    _, seen = run
    assert seen["dict"][3] == "actor_rollout+critic[rank 1/2]"
    assert seen["fused"][3] == "actor_rollout+critic[rank 1/2]"


def test_each_colocated_role_is_a_process_with_rank_tracks(run):
    got, flows = {}, 0
    for path in run[0]:
        assert stats_errors(path) == []
        with TraceProcessor(path) as tp:
            rows = tp.query("""
                select p.name as role, t.name as thread, s.name as method, count(*) as n from slice s
                join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid)
                where s.category = 'call' group by 1, 2, 3 order by 1, 2, 3""")
            flows += tp.query("""select count(*) as n from flow f join slice si on f.slice_in = si.id
                                 where si.name = 'compute_values'""")[0]["n"]
        for r in rows:
            key = (r["role"], r["thread"], r["method"])
            got[key] = got.get(key, 0) + r["n"]
    for rank in (0, 1):
        assert got[("actor_rollout", f"rank {rank}", "update_actor")] == 2        # WorkerDict + fused
        assert got[("critic", f"rank {rank}", "compute_values")] == 2
        assert got[("async", f"rank {rank}", "ping")] == 1
    assert flows == 4
