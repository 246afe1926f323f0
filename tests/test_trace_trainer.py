"""A traced run of the reference trainer, checked in Perfetto's trace processor: no error
stats, a span for every (role, rank, registered call) of every step, flows from each dispatch
to its ranks, memory counters per rank, and offload transitions whose memory drop shows."""
from __future__ import annotations

import pytest

from reference_trainer.config import load_config
from reference_trainer.trainer import fit
from trace_processor import TraceProcessor

STEPS = 2
PER_STEP = {"to_rollout_mode", "generate_sequences", "to_train_mode", "compute_ref_log_prob", "update_actor"}


@pytest.fixture(scope="module")
def trace(ray_cluster, tmp_path_factory):
    run = tmp_path_factory.mktemp("traced")
    cfg = load_config("demo", overrides=[
        f"trainer.run_dir={run}", f"trainer.total_steps={STEPS}", "trainer.progress=false",
        "trace.enabled=true", "control.enabled=false", "model.preset=llama-small",
        "data.prompts_per_step=4", "data.group_size=4", "actor.mini_batch_size=16", "actor.micro_batch_size=8"])
    fit(cfg)
    with TraceProcessor(str(run / "trace.json.gz")) as tp:
        yield tp


def _rows(tp, sql):
    return tp.query(sql)


def test_no_error_or_data_loss_stats(trace):
    bad = _rows(trace, "select name, value from stats where severity in ('error', 'data_loss') and value > 0")
    assert bad == []


def test_a_span_per_role_rank_call_and_step(trace):
    rows = _rows(trace, """
        select p.name as role, t.name as rank, s.name as method, extract_arg(s.arg_set_id, 'args.step') as step
        from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
        join process p using (upid) where s.category = 'call'""")
    seen = {(r["role"], r["rank"], r["method"], r["step"]) for r in rows}
    for step in range(STEPS):
        for rank in ("rank 0", "rank 1"):
            for method in PER_STEP:
                assert ("actor", rank, method, step) in seen, (method, rank, step)
            assert ("reward", rank, "compute_scores", step) in seen


def test_one_flow_per_dispatch_to_each_rank(trace):
    rows = _rows(trace, """
        select src.name as src, dst.name as dst from flow f
        join slice src on f.slice_out = src.id join slice dst on f.slice_in = dst.id
        where dst.category = 'call' and dst.name = 'update_actor'""")
    assert len(rows) == 2 * STEPS  # driver → rank 0 and rank 1, each step
    assert {r["src"] for r in rows} == {"send → rank 0", "send → rank 1"}


def test_memory_counter_tracks_per_rank(trace):
    names = {r["name"] for r in _rows(trace, "select distinct name from counter_track")}
    for rank in (0, 1):
        assert f"rank {rank} memory rss" in names
        assert f"rank {rank} ledger optimizer" in names


def test_offload_transitions_show_the_memory_drop(trace):
    rows = _rows(trace, """
        select extract_arg(arg_set_id, 'args.mem_before') as before,
               extract_arg(arg_set_id, 'args.mem_after') as after
        from slice where name = 'offload_optimizer'""")
    assert rows, "no offload_optimizer transition in the trace"
    # Adam state of ~25M parameters is ~200 MB: the process's memory falls by most of it.
    drops = [r["before"] - r["after"] for r in rows if r["before"] is not None]
    assert max(drops) > 100 * (1 << 20), drops
    ledger = _rows(trace, """
        select c.value from counter c join counter_track t on c.track_id = t.id
        where t.name = 'rank 0 ledger optimizer' order by c.ts""")
    assert 0 in {r["value"] for r in ledger}  # the ledger shows the optimizer gone during rollout
