"""Two calls running at once on one actor label their events with their own role/rank/method/step:
the context of a call is its own (rldbg.context), not the process's. On an async actor the calls
interleave at their awaits; on a threaded one they run in two threads. Each call records a span
that stays open while the other call enters (and, for the first, while the other is still inside
when it ends), through the real tracing path: worker_call, the collector, the exported trace."""
from __future__ import annotations

import asyncio
import os
import threading

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import pytest  # noqa: E402
import ray  # noqa: E402

import rldbg  # noqa: E402
from rldbg import instrument as ri  # noqa: E402

WAIT_S = 60


@ray.remote(num_cpus=0)
class AsyncServer:
    """`first` waits inside its span until `second` has entered its own; `second` waits until
    `first` has recorded its events after that and left."""

    def __init__(self):
        ri.set_worker_identity("rollout", 0, 1)
        self.second_in, self.first_done = asyncio.Event(), asyncio.Event()

    async def serve(self, method, tag, first):
        with ri.worker_call("rollout", 0, method, tag):
            rldbg.instant("entered", who=method)
            with rldbg.span("across", who=method):   # its labels are read as it ends: after the other entered
                if first:
                    await asyncio.wait_for(self.second_in.wait(), WAIT_S)
                else:
                    self.second_in.set()
                    await asyncio.wait_for(self.first_done.wait(), WAIT_S)
            rldbg.instant("resumed", who=method)
            with rldbg.span("after", who=method):
                await asyncio.sleep(0)
        if first:
            self.first_done.set()   # the second call resumes with the first call's context gone
        return method


@ray.remote(num_cpus=0, max_concurrency=2)
class ThreadedServer:
    """The same two calls on a threaded actor: two threads of one process."""

    def __init__(self):
        ri.set_worker_identity("rollout", 1, 2)
        self.second_in, self.first_done = threading.Event(), threading.Event()

    def serve(self, method, tag, first):
        with ri.worker_call("rollout", 1, method, tag):
            rldbg.instant("entered", who=method)
            with rldbg.span("across", who=method):
                if first:
                    assert self.second_in.wait(WAIT_S)
                else:
                    self.second_in.set()
                    assert self.first_done.wait(WAIT_S)
            rldbg.instant("resumed", who=method)
            with rldbg.span("after", who=method):
                pass
        if first:
            self.first_done.set()
        return method


@pytest.mark.parametrize("server", [AsyncServer, ThreadedServer], ids=["async", "threaded"])
def test_two_concurrent_calls_on_one_actor_record_their_own_method_and_step(ray_cluster, tmp_path, server):
    from trace_of import load_events

    rank = 0 if server is AsyncServer else 1
    path = str(tmp_path / "trace.json")
    actor = server.remote()
    try:
        with rldbg.trace.tracing(path, memory_hz=0):
            gen = ri.call_begin("rollout", "generate", "one", 1, step=3)
            score = ri.call_begin("rollout", "score", "one", 1, step=4)
            refs = [actor.serve.remote("generate", gen.tag, True), actor.serve.remote("score", score.tag, False)]
            assert ray.get(refs, timeout=2 * WAIT_S) == ["generate", "score"]
            for call, ref in ((gen, refs[0]), (score, refs[1])):
                ri.call_collected(call, None)
    finally:
        ray.kill(actor)
    want = {"generate": 3, "score": 4}
    user = [e for e in load_events(path) if e.get("cat") == "user"]
    assert sorted((e["name"], e["args"]["who"]) for e in user) == sorted(
        (name, who) for name in ("entered", "across", "resumed", "after") for who in want)
    for e in user:
        a = e["args"]
        assert (a["role"], a["rank"], a["step"]) == ("rollout", rank, want[a["who"]]), e
        if e["ph"] == "X":   # slices carry the method too (instants do not, in Perfetto's layout)
            assert a["method"] == a["who"], e
    calls = {e["name"]: e["args"] for e in load_events(path) if e.get("ph") == "X" and e.get("cat") == "call"}
    assert {m: (a["step"], a["rank"]) for m, a in calls.items()} == {"generate": (3, rank), "score": (4, rank)}
