"""GPU memory truth on a real GPU under Ray: a traced actor's transitions are judged by what they
returned to the device (returned / kept in the allocator's cache / still referenced), and NVML
attributes a second process's memory to its pid. Skipped where CUDA is absent (CI here); run on
the GPU machine by bench/gpu_check.sh (`pytest -m gpu`, with this suite's Ray conftest)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MiB = 1 << 20


def test_nvml_names_a_second_process_and_its_memory():
    from rldbg.memory import nvml

    torch.ones(1, device="cuda")   # this process on the GPU: nvml.gpus() follows torch's device
    gpus = nvml.gpus()
    if not gpus:
        pytest.skip("NVML is not available here")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, torch; x = torch.ones(256 << 20, dtype=torch.uint8, device='cuda'); "
                               "torch.cuda.synchronize(); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        seen = {}
        for _ in range(20):
            seen = nvml.processes(gpus[0])
            if holder.pid in seen:
                break
            time.sleep(0.2)
        assert holder.pid in seen, seen
        if seen[holder.pid]:   # some containers list the process but not its bytes
            assert seen[holder.pid] >= 256 * MiB
        assert os.getpid() in seen
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_transitions_on_a_gpu_actor_are_judged_by_the_device(ray_cluster, tmp_path):
    import ray

    import rldbg.trace
    from rldbg import instrument as ri
    from rldbg.trace.report import analyse

    @ray.remote(num_gpus=1, num_cpus=0)
    class Holder:
        def __init__(self):
            ri.set_worker_identity("actor", 0, 1)
            self.kept = []

        def cycle(self, tag):
            with ri.worker_call("actor", 0, "cycle", tag):
                w = torch.ones(64 * MiB, dtype=torch.uint8, device="cuda")
                ri.ledger("weights", w.numel())
                cache = torch.ones(48 * MiB, dtype=torch.uint8, device="cuda")
                ri.ledger("cache", cache.numel())
                with ri.transition("drop_weights", frees=("weights",)):
                    self.kept.append(w)   # still referenced: nothing freed
                    del w
                    ri.ledger("weights", 0)
                self.kept.clear()
                torch.cuda.empty_cache()
                with ri.transition("drop_cache", frees=("cache",)):
                    del cache           # freed, but the allocator keeps the blocks
                    torch.cuda.synchronize()
                    ri.ledger("cache", 0)
                again = torch.ones(32 * MiB, dtype=torch.uint8, device="cuda")
                ri.ledger("buffer", again.numel())
                with ri.transition("drop_buffer", frees=("buffer",)):
                    del again
                    torch.cuda.empty_cache()   # returned to the device
                    ri.ledger("buffer", 0)
                torch.cuda.empty_cache()

    path = str(tmp_path / "gpu.json.gz")
    with rldbg.trace.tracing(path, memory_hz=20):
        h = Holder.remote()
        for n in range(4):
            with ri.step(n):
                c = ri.call_begin("actor", "cycle", "all", 1, n)
                ref = h.cycle.remote(c.tag)
                ri.call_dispatched(c)
                ray.get(ref)
                ri.call_collected(c)
    ray.kill(h)
    r = analyse(path)
    verdicts = {row["transition"].split(" [")[0]: row["verdict"] for row in r["transitions"]}
    assert verdicts == {"drop_weights": "held", "drop_cache": "cached", "drop_buffer": "returned"}, r["transitions"]
    named = {(f["transition"].split(" [")[0], f["verdict"]) for f in r["not_returned"]}
    assert named == {("drop_weights", "held"), ("drop_cache", "cached")}, r["not_returned"]
    assert r["gpus"] and any(p["in_job"] for p in r["gpus"][0]["processes"]), r["gpus"]
