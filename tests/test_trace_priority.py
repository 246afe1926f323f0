"""Tracing's background work runs at nice 19 (rldbg/trace/background.py), in the real processes:
the collector's listener threads in the driver (trace/server.py), the flusher and memory sampler
of the driver and of a traced worker; and nothing else of a worker's or the driver's, their main
threads (where the user's calls run) least of all."""
from __future__ import annotations

import os
import threading
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray  # noqa: E402

import rldbg  # noqa: E402
from rldbg.trace import runtime  # noqa: E402
from rldbg.trace.background import NICE  # noqa: E402

OURS = ("rldbg-flusher", "rldbg-mem-sampler")
COLLECTOR = ("rldbg-collector-accept", "rldbg-collector-conn")   # the driver's only


def nice_of(tid: int) -> int:
    # /proc/self/task/<tid>/stat: field 19 is the nice value (after the parenthesised comm).
    with open(f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def python_threads() -> dict:
    """{thread name: nice} of this process's Python threads, the main one as "main" (threads of
    one name: the highest priority any of them has, which is the lowest nice)."""
    out: dict = {}
    for t in threading.enumerate():
        if t.native_id is not None:
            name = "main" if t is threading.main_thread() else t.name
            out[name] = min(out.get(name, NICE), nice_of(t.native_id))
    return out


def settled() -> dict:
    """python_threads() once tracing's two threads exist and have lowered themselves (each does
    so first thing when it starts), or as they are after 10 s."""
    for _ in range(100):
        threads = python_threads()
        if all(threads.get(n) == NICE for n in OURS):
            break
        time.sleep(0.1)
    return threads


@ray.remote(num_cpus=0)
class Traced:
    def work(self) -> dict:
        with rldbg.span("work"):
            pass
        runtime.flush()
        return settled()


def test_background_threads_and_the_collector_are_niced(ray_cluster, tmp_path):
    assert NICE == 19
    with rldbg.trace.tracing(str(tmp_path / "t.json.gz"), memory_hz=10):
        worker = Traced.remote()
        seen = ray.get(worker.work.remote())   # the worker is connected: the driver serves it
        driver = settled()
    ray.kill(worker)
    assert {n: driver.get(n) for n in COLLECTOR} == {n: NICE for n in COLLECTOR}, driver
    for who, threads, ours in (("worker", seen, OURS), ("driver", driver, OURS + COLLECTOR)):
        assert {n: threads.get(n) for n in OURS} == {n: NICE for n in OURS}, (who, threads)
        # The user's own threads keep the priority their process started with (Ray starts its
        # workers at nice 15, a driver keeps the shell's).
        assert threads["main"] < NICE, (who, threads)
        assert all(v == threads["main"] for n, v in threads.items() if n not in ours), (who, threads)
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0
