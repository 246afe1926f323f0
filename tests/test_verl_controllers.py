"""Two controllers in one job (tests/verl_controllers.py, plain VeRL: a trainer-like actor and an
evaluation actor, each calling its own worker group, at the same time) get a track each on the
driver's process, and `rldbg report` measures each one's idle time apart and counts the job's
steps once."""
from __future__ import annotations

import ray
import pytest

from verl_support import require_entry_point

import rldbg.trace
from rldbg.trace.report import analyse, analyse_trace
from trace_processor import TraceProcessor

LOOPS, THINK_S = 4, 0.2


@pytest.fixture(scope="module")
def run(ray_cluster, tmp_path_factory):
    require_entry_point()
    from verl_controllers import Controller

    path = str(tmp_path_factory.mktemp("controllers") / "trace.json.gz")
    rldbg.trace.start(path)
    env = {"env_vars": {"RLDBG_VERL": "1"}}   # each controller loads rldbg through VeRL's plugins
    trainer, evaluator = Controller.options(runtime_env=env).remote(), Controller.options(runtime_env=env).remote()
    try:
        pids = ray.get([trainer.run.remote("ActorWorker", "actor", "update_actor", LOOPS, THINK_S),
                        evaluator.run.remote("CriticWorker", "critic", "compute_values", LOOPS, THINK_S)])
    finally:
        rldbg.trace.stop()
        for a in (trainer, evaluator):
            ray.kill(a)
    return path, {"actor": pids[0], "critic": pids[1]}


def test_each_controller_has_a_track_of_its_own(run):
    path, pids = run
    with TraceProcessor(path) as tp:
        rows = tp.query("""
            select t.name as thread, extract_arg(s.arg_set_id, 'args.group') as grp, count(*) as n from slice s
            join thread_track tt on s.track_id = tt.id join thread t using (utid) join process p using (upid)
            where p.name = 'driver' and s.category = 'driver_call' and s.name in ('update_actor', 'compute_values')
            group by 1, 2 order by 1""")
    assert len(rows) == 2 and {r["grp"] for r in rows} == {"actor", "critic"} and all(r["n"] == LOOPS for r in rows)
    # The first controller seen keeps the "driver" track; the other's is named by its pid.
    first, other = sorted(rows, key=lambda r: r["thread"] != "driver")
    assert first["thread"] == "driver" and other["thread"] == f"controller pid {pids[other['grp']]}", rows
    r = analyse(path)
    assert sorted((x["rank"], x["pid"]) for x in r["ranks"] if x["role"] == "driver") == [
        (0, pids[first["grp"]]), (1, pids[other["grp"]])]


def test_each_controllers_idle_time_is_its_own(run):
    path, pids = run
    r = analyse(path)
    _, t = analyse_trace(path)
    first = next(d["args"]["group"] for d in t.driver_calls if d["rank"] == 0)
    method = {"actor": "update_actor", "critic": "compute_values"}
    c = r["controller"]
    # Gaps between one controller's own calls, never from one controller's call to the other's.
    assert all((g["after"], g["before"]) == (method[first],) * 2 for g in c["largest_gaps"]), c
    assert len(c["largest_gaps"]) >= LOOPS - 1 and all(g["idle_s"] >= 0.9 * THINK_S for g in c["largest_gaps"]), c
    [o] = c["others"]
    second = ({"actor", "critic"} - {first}).pop()
    assert o["track"] == 1 and o["calls"] == LOOPS, o
    assert all((g["after"], g["before"]) == (method[second],) * 2 for g in o["largest_gaps"]), o
    # The job's steps are one controller's (each learnt its own from its call order).
    assert r["time"]["steps"] == LOOPS
    assert f"controller pid {pids[second]} (track 1, {LOOPS} call(s)) idle:" in rldbg.trace.report.render(r)
