"""Plain @ray.remote actors (no trainer) traced end to end, checked with the real trace processor."""
from __future__ import annotations

import os
import subprocess
import sys
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import pytest  # noqa: E402
import ray  # noqa: E402

import rldbg  # noqa: E402
from rldbg import instrument as ri  # noqa: E402
from trace_processor import TraceProcessor, stats_errors  # noqa: E402

STEPS = 2


@ray.remote(num_cpus=0)
class Worker:
    def __init__(self, role, rank, world):
        self.role, self.rank = role, rank
        ri.set_worker_identity(role, rank, world)
        ri.ledger("params", 4096 * (rank + 1))

    def work(self, method, tag):
        with ri.worker_call(self.role, self.rank, method, tag):
            with rldbg.span("inner", rank=self.rank):
                time.sleep(0.01)
            with ri.transition("offload_optimizer"):
                ri.ledger("optimizer", 0)
            rldbg.counter("tokens", n=10)
            return self.rank


def _call(group, workers, method, step):
    c = ri.call_begin(group, method, "all", len(workers), step)
    refs = [w.work.remote(method, c.tag) for w in workers]
    ri.call_dispatched(c, [{"rows": 4, "keys": [{"key": "x", "shape": [4], "dtype": "f32", "nbytes": 16}]}] * len(workers))
    ri.call_collected(c, {"rows": len(ray.get(refs))})


@pytest.fixture(scope="module")
def trace(ray_cluster, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("plain") / "trace.json.gz")
    with rldbg.trace.tracing(path, memory_hz=20):
        ws = [Worker.remote("rollout", r, 2) for r in range(2)]
        for n in range(STEPS):
            with ri.step(n):
                _call("rollout", ws, "generate", n)
                with rldbg.span("advantages"):
                    rldbg.instant("mid", n=n)
    for w in ws:   # after stop(): killed actors lose their last unflushed ~0.1 s of events
        ray.kill(w)
    return path


@pytest.fixture(scope="module")
def tp(trace):
    with TraceProcessor(trace) as t:
        yield t


def test_trace_loads_without_errors(trace):
    assert stats_errors(trace) == []


def test_one_slice_per_rank_per_call(tp):
    rows = tp.query("""
        select p.name as role, t.name as thread, count(*) as n from slice s
        join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid)
        where s.name = 'generate' and s.category = 'call' group by 1, 2 order by 2""")
    assert rows == [{"role": "rollout", "thread": "rank 0", "n": STEPS},
                    {"role": "rollout", "thread": "rank 1", "n": STEPS}]
    nested = tp.query("""select count(*) as n from slice c join slice p on c.parent_id = p.id
                         where c.name in ('inner', 'offload_optimizer') and p.name = 'generate'""")
    assert nested[0]["n"] == 2 * 2 * STEPS


def test_flows_run_driver_to_each_rank_and_back(tp):
    rows = tp.query("""select so.name as src, si.name as dst from flow f
                       join slice so on f.slice_out = so.id join slice si on f.slice_in = si.id""")
    pairs = sorted((r["src"], r["dst"]) for r in rows)
    want = sorted([("send → rank 0", "generate"), ("send → rank 1", "generate"),
                   ("generate", "recv ← rank 0"), ("generate", "recv ← rank 1")] * STEPS)
    assert pairs == want


def test_driver_call_nests_dispatch_and_wait(tp):
    rows = tp.query("""select c.name as child, count(*) as n from slice c join slice p on c.parent_id = p.id
                       where p.name = 'generate' and p.category = 'driver_call' group by 1 order by 1""")
    assert {r["child"]: r["n"] for r in rows} == {"dispatch": STEPS, "wait": STEPS}
    steps = tp.query("select count(*) as n from slice where category = 'step' and dur > 0")
    assert steps[0]["n"] == STEPS


def test_counter_tracks_per_rank(tp):
    names = {r["name"] for r in tp.query("select distinct name from counter_track")}
    assert {"rank 0 memory rss", "rank 1 memory rss", "rank 0 ledger params", "rank 1 ledger optimizer",
            "rank 0 tokens n"} <= names
    rows = tp.query("""select max(c.value) as v from counter c join process_counter_track t on c.track_id = t.id
                       join process p using (upid) where p.name = 'rollout' and t.name = 'rank 1 ledger params'""")
    assert rows[0]["v"] == 8192


def test_user_spans_and_instants_carry_context(tp):
    rows = tp.query("""select s.name, extract_arg(s.arg_set_id, 'args.step') as step,
                       extract_arg(s.arg_set_id, 'args.method') as method from slice s where s.name = 'inner'""")
    assert len(rows) == 2 * STEPS and {r["method"] for r in rows} == {"generate"}
    mid = tp.query("select count(*) as n from slice where name = 'mid' and dur = 0")
    assert mid[0]["n"] == STEPS


def test_spill_exports_again_from_cli(trace, tmp_path):
    spill = trace[: -len(".json.gz")] + ".spill"
    out = str(tmp_path / "again.json")
    r = subprocess.run([sys.executable, "-m", "rldbg.cli", "export", spill, "-o", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert stats_errors(out) == []
    bad = subprocess.run([sys.executable, "-m", "rldbg.cli", "export", str(tmp_path), "-o", out],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "not an rldbg spill directory" in bad.stderr


def test_drops_are_counted_into_the_trace(ray_cluster, tmp_path):
    path = str(tmp_path / "drops.json")
    with rldbg.trace.tracing(path, memory_hz=0, buffer_events=50):
        for i in range(5000):
            rldbg.instant("flood", i=i)
    with TraceProcessor(path) as t:
        total = t.query("""select c.value from counter c join counter_track t on c.track_id = t.id
                           where t.name = 'rldbg dropped events total'""")
        kept = t.query("select count(*) as n from slice where name = 'flood'")[0]["n"]
    assert total[0]["value"] > 0
    assert kept + total[0]["value"] == 5000


def test_off_is_a_noop(ray_cluster):
    assert not ri.enabled()
    c = ri.call_begin("g", "m", "all", 1, 0)
    ri.call_dispatched(c, None)
    ri.call_collected(c, None)
    with ri.worker_call("r", 0, "m", c.tag), ri.transition("offload_params"), rldbg.span("s"):
        ri.ledger("params", 1)
        rldbg.instant("i")
    assert c.t_begin == 0


def test_bad_inputs_give_clear_errors(ray_cluster, tmp_path):
    with pytest.raises(ValueError, match="must end in .json"):
        rldbg.trace.start(str(tmp_path / "x.txt"))
    with pytest.raises(ValueError, match="memory_hz"):
        rldbg.trace.start(str(tmp_path / "x.json"), memory_hz=-1)
    with pytest.raises(ValueError, match="span name"):
        rldbg.span("")


def test_workers_created_just_before_tracing_starts_record_their_first_calls(ray_cluster, tmp_path):
    """Workers look for the collector when they start (none yet), then tracing starts and the
    first traced call arrives well within the usual 1 s re-check: the call's session tag must
    make them look again at once, or every rank's first calls go missing from the trace."""
    from trace_of import load_events

    ws = [Worker.remote("critic", r, 2) for r in range(2)]
    ray.get([w.__ray_ready__.remote() for w in ws])
    path = str(tmp_path / "late.json")
    try:
        with rldbg.trace.tracing(path, memory_hz=0):
            _call("critic", ws, "update", 0)
    finally:
        for w in ws:
            ray.kill(w)
    calls = {(e["args"].get("role"), e["args"].get("rank")) for e in load_events(path)
             if e.get("ph") == "X" and e.get("cat") == "call"}
    assert calls == {("critic", 0), ("critic", 1)}, calls


def test_tracing_leaves_no_actors_or_tasks_of_its_own_in_the_dashboard(trace):
    """Every traced process ships to the collector once a second for the whole run, over its own
    connection to the driver (trace/server.py): none of that may crowd the user's tasks out of the
    dashboard's task list (the GCS keeps a bounded number) or show there as work of the job."""
    from conftest import task_listed, tasks_of_actors

    assert task_listed("Worker.work")   # the user's calls are listed
    assert tasks_of_actors("Collector") == (0, [])
