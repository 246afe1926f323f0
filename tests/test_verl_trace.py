"""rldbg on real VeRL worker groups (CPU, the session's Ray cluster), installed through
rldbg.integrations.verl.install() in the driver: the workers install it themselves through the
verl.plugins entry point (the driver hands them RLDBG_VERL=1 through VeRL's worker_env)."""
from __future__ import annotations

import ray
import pytest

from verl_support import batch, group, require_entry_point, teardown

import rldbg.trace  # noqa: E402
from rldbg.trace.report import analyse, analyse_trace  # noqa: E402
from trace_processor import TraceProcessor, stats_errors  # noqa: E402

LOOPS = 3
ROLLOUT_MIB = 32
MiB = 1 << 20


@pytest.fixture(scope="module")
def trace(ray_cluster, tmp_path_factory):
    require_entry_point()
    import rldbg.integrations.verl as rv

    rv.install()
    from verl_workers import ActorWorker, CriticWorker

    path = str(tmp_path_factory.mktemp("verl") / "trace.json.gz")
    rldbg.trace.start(path, memory_hz=20)
    actor, critic = group(ActorWorker, "actor"), group(CriticWorker)
    try:
        d = batch()
        assert actor.whoami() == [0, 1] and critic.whoami() == [0, 1]
        for _ in range(LOOPS):
            out = actor.update_actor(d)
            critic.compute_values(out.union(d))
        assert ray.get(actor.later(0.2)) == [0, 1]     # blocking=False: a list of futures
        actor.offload_cycle()
        assert actor.rollout_cycle(ROLLOUT_MIB) == [0, 1]
        with pytest.raises(Exception, match="refuses"):
            actor.fail()
        rv.end_step()
    finally:
        rldbg.trace.stop()
        teardown(actor, critic)
    return path


@pytest.fixture(scope="module")
def tp(trace):
    with TraceProcessor(trace) as t:
        yield t


def test_trace_loads_without_errors(trace):
    assert stats_errors(trace) == []


def test_one_process_per_role_one_track_per_rank(tp):
    rows = tp.query("""
        select p.name as role, t.name as thread, s.name as method, count(*) as n from slice s
        join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid)
        where s.category = 'call' and s.name in ('update_actor', 'compute_values') group by 1, 2, 3 order by 1, 2""")
    assert rows == [{"role": "CriticWorker", "thread": "rank 0", "method": "compute_values", "n": LOOPS},
                    {"role": "CriticWorker", "thread": "rank 1", "method": "compute_values", "n": LOOPS},
                    {"role": "actor", "thread": "rank 0", "method": "update_actor", "n": LOOPS},
                    {"role": "actor", "thread": "rank 1", "method": "update_actor", "n": LOOPS}]


def test_flows_driver_to_each_rank_and_back(tp):
    rows = tp.query("""select so.name as src, si.name as dst from flow f
                       join slice so on f.slice_out = so.id join slice si on f.slice_in = si.id
                       where so.name = 'update_actor' or si.name = 'update_actor'""")
    pairs = sorted((r["src"], r["dst"]) for r in rows)
    assert pairs == sorted([("send → rank 0", "update_actor"), ("send → rank 1", "update_actor"),
                            ("update_actor", "recv ← rank 0"), ("update_actor", "recv ← rank 1")] * LOOPS)


def test_driver_calls_carry_verl_dispatch_modes_and_shards(tp):
    rows = tp.query("""select extract_arg(s.arg_set_id, 'args.group') || '.' || s.name as name,
                       extract_arg(s.arg_set_id, 'args.mode') as mode,
                       extract_arg(s.arg_set_id, 'args.status') as status from slice s
                       where s.category = 'driver_call' and extract_arg(s.arg_set_id, 'args.mode') is not null""")
    modes = {(r["name"], r["mode"], r["status"]) for r in rows}
    assert ("actor.update_actor", "DP_COMPUTE_PROTO", "ok") in modes
    assert ("actor.later", "ONE_TO_ALL", "ok") in modes           # closed when its futures were ready
    assert ("actor.fail", "ONE_TO_ALL", "error") in modes
    later = tp.query("""select dur from slice where name = 'later' and category = 'driver_call'
                        and extract_arg(arg_set_id, 'args.mode') is not null""")
    assert later[0]["dur"] >= 0.2e9


def test_memory_counters_per_rank(tp):
    names = {(r["p"], r["name"]) for r in tp.query("""select p.name as p, t.name from process_counter_track t
                                                       join process p using (upid)""")}
    assert {("actor", "rank 0 memory rss"), ("actor", "rank 1 memory rss"),
            ("CriticWorker", "rank 1 memory rss")} <= names


def test_steps_from_call_order(trace, tp):
    # update_actor is the loop's first call that comes round again: steps 2..LOOPS start there, and
    # step 1 (the first pass, before the loop was known) is recorded when it first comes round.
    steps = tp.query("select name from slice where category = 'step' and dur > 0 order by ts")
    assert [r["name"] for r in steps] == [f"step {n}" for n in range(1, LOOPS + 1)]
    rows = tp.query("""select extract_arg(arg_set_id, 'args.step') as step from slice
                       where category = 'call' and name = 'update_actor' order by ts""")
    assert [r["step"] for r in rows] == [None, None] + [n for n in range(2, LOOPS + 1) for _ in (0, 1)]
    # The report numbers the first pass's calls by that step.
    _, t = analyse_trace(trace)
    numbered = sorted((c["step"], c["rank"]) for c in t.calls if c["method"] == "update_actor")
    assert numbered == [(n, r) for n in range(1, LOOPS + 1) for r in (0, 1)]


def test_fsdp_offload_helpers_are_transitions(tp):
    rows = tp.query("""select s.name, p.name as role, t.name as thread, extract_arg(s.arg_set_id, 'args.mem_before') as m0,
                       extract_arg(s.arg_set_id, 'args.mem_after') as m1 from slice s
                       join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid)
                       where s.category = 'transition' and s.name like '%fsdp%' order by s.name, t.name""")
    assert [(r["name"], r["role"], r["thread"]) for r in rows] == [
        ("load_fsdp_optimizer", "actor", "rank 0"), ("load_fsdp_optimizer", "actor", "rank 1"),
        ("offload_fsdp_optimizer", "actor", "rank 0"), ("offload_fsdp_optimizer", "actor", "rank 1")]
    assert all(r["m0"] > 0 and r["m1"] > 0 for r in rows)


def test_rollout_sleep_and_wake_are_transitions(trace):
    # VeRL's BaseRollout.resume(tags) / release() on the hybrid worker: one transition each, on
    # the rank that called it, declaring what moves in the reference trainer's ledger names, with
    # the memory it took or gave back at its edges (RSS here; the device's used bytes on a GPU).
    _, t = analyse_trace(trace)
    rollout = sorted((x for x in t.transitions if x["name"].startswith("rollout_")), key=lambda x: x["ts"])
    for rank in (0, 1):
        mine = [x for x in rollout if x["rank"] == rank]
        assert [(x["name"], x["role"], x["method"]) for x in mine] == [
            ("rollout_wake", "actor", "rollout_cycle")] * 2 + [("rollout_sleep", "actor", "rollout_cycle")]
        weights, kv, sleep = (x["args"] for x in mine)
        assert (weights["loads"], weights["tags"], kv["loads"], kv["tags"], sleep["frees"]) == (
            ["rollout_weights"], ["weights"], ["kv_cache"], ["kv_cache"], ["rollout_weights", "kv_cache"])
        assert weights["mem_after"] - weights["mem_before"] >= 0.8 * ROLLOUT_MIB * MiB
        assert kv["mem_after"] - kv["mem_before"] >= 0.8 * ROLLOUT_MIB * MiB
        assert sleep["mem_before"] - sleep["mem_after"] >= 0.8 * 2 * ROLLOUT_MIB * MiB


def test_healthy_run_names_no_straggler(trace):
    r = analyse(trace)
    # Only the calls that do work: the detector (not this integration) still judges single
    # sub-millisecond calls such as `fail` by their ratio alone.
    assert [s for s in r["stragglers"] if s["method"] in ("update_actor", "compute_values")] == []
    assert {"actor", "CriticWorker"} <= set(r["time"]["roles"])
