"""`rldbg stack`'s explanations from more than one look: a snapshot of a healthy run catches one
rank a moment behind the other (still in a call, or in its all_reduce while the other computes),
so a role's line stays only where every look finds its ranks as they were (rldbg.profilers.stacks.
explain's `again`). Stacks here are py-spy's records as the dashboard or py-spy give them for two
ranks of one role; test_hang and test_debug_e2e look at real hung and paused ranks."""
from __future__ import annotations

from rldbg.profilers import stacks
from rldbg.profilers.pyspy import Frame, Thread
from rldbg.profilers.targets import Target

BETWEEN = [Frame("Worker.main_loop", "ray/_private/worker.py", 900)]
IN_UPDATE = [Frame("forward", "model.py", 40), Frame("Actor.update", "workers/actor.py", 120), *BETWEEN]
IN_ALL_REDUCE = [Frame("all_reduce", "torch/distributed/distributed_c10d.py", 2500),
                 Frame("sync_gradients", "workers/train_ops.py", 72), *BETWEEN]
IN_GENERATE = [Frame("generate", "engine.py", 77), Frame("Actor.generate", "workers/actor.py", 80), *BETWEEN]


def _look(*frames_by_rank) -> list[stacks.Result]:
    return [stacks.Result(Target("actor", rank, 100 + rank, "127.0.0.1", "n", f"a{rank}"),
                          [Thread("MainThread", rank, True, list(frames))], "py-spy")
            for rank, frames in enumerate(frames_by_rank)]


def test_a_rank_a_moment_behind_is_not_explained():
    first = _look(IN_UPDATE, BETWEEN)
    assert stacks.explain(first, again=lambda: _look(BETWEEN, BETWEEN)) == []
    assert stacks.explain(first, again=lambda: _look(IN_UPDATE, IN_UPDATE)) == []


def test_a_rank_in_its_all_reduce_a_moment_is_not_explained():
    first = _look(IN_ALL_REDUCE, IN_UPDATE)
    assert stacks.explain(first)[0].startswith("actor: rank 0 waits in all_reduce at sync_gradients")
    looks = iter([_look(IN_ALL_REDUCE, IN_UPDATE), _look(IN_UPDATE, IN_UPDATE)])
    assert stacks.explain(first, again=lambda: next(looks)) == [], "the third look saw it move on"


def test_a_hang_whose_odd_rank_keeps_running_is_explained():
    """Rank 0 waits in the same all_reduce at every look; rank 1 loops (its line moves each time),
    and one look could not read it at all."""
    looks = iter([_look(IN_ALL_REDUCE, IN_GENERATE), _look(IN_ALL_REDUCE)[:1], _look(IN_ALL_REDUCE, IN_UPDATE)])
    lines = stacks.explain(_look(IN_ALL_REDUCE, IN_UPDATE), again=lambda: next(looks))
    assert len(lines) == 1 and lines[0].startswith("actor: rank 0 waits in all_reduce at sync_gradients"), lines


def test_ranks_that_stay_put_are_explained_after_four_looks():
    looks = []

    def again():
        looks.append(1)
        return _look(IN_UPDATE, BETWEEN)
    lines = stacks.explain(_look(IN_UPDATE, BETWEEN), again=again)
    assert lines == ["actor: rank 0 still in a call (running in forward (model.py:40)); rank 1 finished"]
    assert looks == [1, 1, 1]
    running_on = iter([_look(IN_UPDATE, BETWEEN), _look(IN_GENERATE, BETWEEN), _look(IN_UPDATE, BETWEEN)])
    assert stacks.explain(_look(IN_UPDATE, BETWEEN), again=lambda: next(running_on)) == lines, "still running: kept"
    assert stacks.explain(_look(IN_UPDATE, BETWEEN)) == lines, "without a second look: the first one says it"


def test_healthy_ranks_take_no_second_look():
    def again():
        raise AssertionError("a second look where nothing differs")
    assert stacks.explain(_look(IN_UPDATE, IN_UPDATE), again=again) == []
    assert stacks.explain(_look(BETWEEN, BETWEEN), again=again) == []


def test_a_colocated_process_asked_for_by_one_role_is_named_by_all():
    """--role reward on an actor+reward process: its main thread runs the actor's update right now."""
    t = Target("actor+reward", 0, 100, "127.0.0.1", "n", "a0", shown_role="reward")
    groups, _ = stacks.group([stacks.Result(t, [Thread("MainThread", 0, True, list(IN_UPDATE))], "py-spy")])
    said = stacks.headline(groups[0])
    assert said.startswith("actor+reward rank 0 in forward (model.py:40)"), said
