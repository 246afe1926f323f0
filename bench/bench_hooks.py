"""Where a traced step's time goes on the training threads, hook by hook, inside a running job:
    python bench/bench_hooks.py [--rounds 20] [--steps 5] [KEY=VALUE ...]
    python bench/bench_hooks.py --rounds 8 --num-cpus 8 resources.device=cuda resources.n_ranks=1   # a GPU

bench_trace_overhead.py says how much slower a traced step is; this says why. It runs the demo's
worker groups (bench/demo_steps.py) in alternating untraced and traced blocks, as that bench does,
and wraps, inside every worker process (through Ray's __ray_call__), rldbg's hooks on the training
thread and the parts they are made of: a worker call's two edges, a transition's span, the memory
samples at those edges and the torch and /proc reads behind them, each event's packing, and the
reference trainer's byte-ledger walk. Each wrapper adds the time spent inside it on the main
thread to a tally; the tallies, the main thread's CPU (schedstat) and its garbage collections
(gc.callbacks) are read before and after each block. Printed: milliseconds per step, all
workers summed, untraced -> traced, and how often each hook ran a traced step.

The same code costs several times more here than in a loop of its own: a worker call's edge runs
right after Ray's task handling or a model's forward pass has evicted its data from the caches.
Nested rows are parts of the row above them; the wrappers' own cost (~0.2 µs a call) is in every
row. The main thread's CPU column resolves only over many rounds (compare bench_trace_overhead).
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray  # noqa: E402

import rldbg.trace  # noqa: E402
from demo_steps import DemoSteps  # noqa: E402
from tracing_threads import schedstat  # noqa: E402
from reference_trainer.config import load_config  # noqa: E402


# The rows, in the order printed, each with its depth: a row's parts follow it, one level deeper.
CALL_START, CALL_END, SPAN = "a worker call's start", "a worker call's end", "a transition's span"
CALL_SAMPLE, SPAN_SAMPLE = "memory samples at calls' edges", "memory samples at transitions' ends"
OPENING = "memory samples at transitions' openings"
RSS, STATS, DEVICE, MEMINFO = "rss (/proc/self/statm)", "the allocator's statistics", "the current device", "cudaMemGetInfo"
EMIT = "events packed and buffered"
REPORT, WALK, OPTIMIZER, ROLLOUT = ("the trainer's ledger reports", "its walks over the tensors",
                                    "listing the optimizer's state", "the rollout engine's part")
LEDGER_EVENT = "rldbg.instrument.ledger"
CPU = "the main thread's CPU"
ROWS = [(CALL_START, 0), (CALL_END, 0), (SPAN, 0), ("parts of the three above:", 1), (CALL_SAMPLE, 1),
        (SPAN_SAMPLE, 1), (OPENING, 1), ("parts of the three above:", 2), (RSS, 2), (STATS, 2), (DEVICE, 2),
        (MEMINFO, 2), (EMIT, 1), (REPORT, 0), (WALK, 1), (OPTIMIZER, 2), (ROLLOUT, 2), (LEDGER_EVENT, 1)]


def _install() -> int:
    """In a worker process: wrap the hooks once; the tallies live on rldbg.instrument._bench_hooks."""
    import gc

    import rldbg.instrument as inst
    if getattr(inst, "_bench_hooks", None) is not None:
        return os.getpid()
    tally = inst._bench_hooks = collections.Counter()
    calls = inst._bench_calls = collections.Counter()
    main = threading.main_thread().ident

    def timed(name, fn, count=True):
        def wrapper(*a, **k):
            if threading.get_ident() != main:   # the sampler's and the flusher's reads are not the step's
                return fn(*a, **k)
            t = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                tally[name] += time.perf_counter_ns() - t
                calls[name] += count
        return wrapper

    started = {}

    def on_gc(phase, info):
        if threading.get_ident() != main:
            return
        if phase == "start":
            started["t"] = time.perf_counter_ns()
        elif "t" in started:
            tally[f"garbage collection, generation {info['generation']}"] += time.perf_counter_ns() - started.pop("t")
    gc.callbacks.append(on_gc)

    import rldbg.memory.probes as probes
    import rldbg.trace.runtime as runtime
    import torch
    probes.rss_bytes = timed(RSS, probes.rss_bytes)
    if torch.cuda.is_available():
        C = torch._C
        C._cuda_memoryStats = timed(STATS, C._cuda_memoryStats)
        C._cuda_getDevice = timed(DEVICE, C._cuda_getDevice)
        torch.cuda.mem_get_info = timed(MEMINFO, torch.cuda.mem_get_info)
    inst._mem_sample = timed(CALL_SAMPLE, inst._mem_sample)
    inst._mem_sample_full = timed(SPAN_SAMPLE, inst._mem_sample_full)
    inst._mem_opening = timed(OPENING, inst._mem_opening)
    runtime.emit = timed(EMIT, runtime.emit)
    call = inst.worker_call
    call.__enter__ = timed(CALL_START, call.__enter__)
    call._end = timed(CALL_END, call._end)
    span = inst.transition   # a class: its three methods are its span, counted once per transition
    span.__init__ = timed(SPAN, span.__init__)
    span.__enter__ = timed(SPAN, span.__enter__, count=False)
    span.__exit__ = timed(SPAN, span.__exit__, count=False)
    probes._reads = None   # resolved again, through the wrappers
    inst.ledger = timed(LEDGER_EVENT, inst.ledger)

    import reference_trainer.engines.hf as hf
    import reference_trainer.workers.hybrid as hybrid
    worker = hybrid.ActorRolloutRefWorker
    worker._report_ledger = timed(REPORT, worker._report_ledger)
    worker._ledger = timed(WALK, worker._ledger)
    hybrid.ops.optimizer_tensors = timed(OPTIMIZER, hybrid.ops.optimizer_tensors)
    hf.HFEngine.memory_ledger = timed(ROLLOUT, hf.HFEngine.memory_ledger)
    return os.getpid()


def _read() -> tuple:
    import rldbg.instrument as inst
    return dict(inst._bench_hooks), dict(inst._bench_calls), schedstat(os.getpid(), os.getpid())


ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])   # the workers get these functions by value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20, help="untraced/traced block pairs")
    ap.add_argument("--steps", type=int, default=5, help="steps per block")
    ap.add_argument("--num-cpus", type=int, default=2, help="the local Ray cluster's CPUs")
    ap.add_argument("--memory-hz", type=float, default=10.0)
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="demo config overrides")
    a = ap.parse_args()
    if a.rounds < 1 or a.steps < 1:
        ap.error(f"--rounds and --steps take a count of 1 or more, got {a.rounds} and {a.steps}")
    scratch = tempfile.TemporaryDirectory(prefix="rldbg-bench-hooks-")   # run dir and traces, removed at the end
    cfg = load_config("demo", overrides=["trace.enabled=false", "control.enabled=false", "trainer.progress=false",
                                         f"trainer.run_dir={scratch.name}/run", *a.overrides])
    ray.init(address="local", num_cpus=a.num_cpus, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    sums, steps = [collections.Counter(), collections.Counter()], [0, 0]
    calls = collections.Counter()   # traced blocks only: how often each hook ran
    try:
        with DemoSteps(cfg) as run:
            hosts = list({h._actor_id.hex(): h for g in run.groups.values() for h in g.hosts}.values())
            ray.get([h.__ray_call__.remote(lambda self: _install()) for h in hosts])

            def block(traced: bool) -> None:
                run.step()   # outside the tally: the first step after tracing starts finds the collector
                before = ray.get([h.__ray_call__.remote(lambda self: _read()) for h in hosts])
                for _ in range(a.steps):
                    run.step()
                after = ray.get([h.__ray_call__.remote(lambda self: _read()) for h in hosts])
                steps[traced] += a.steps
                for (t0, n0, cpu0), (t1, n1, cpu1) in zip(before, after):
                    sums[traced].update({k: v - t0.get(k, 0) for k, v in t1.items()})
                    sums[traced][CPU] += cpu1 - cpu0
                    if traced:
                        calls.update({k: v - n0.get(k, 0) for k, v in n1.items()})

            for r in range(a.rounds):
                for traced in ((False, True) if r % 2 == 0 else (True, False)):   # which goes first alternates
                    if not traced:
                        block(False)
                        continue
                    rldbg.trace.start(os.path.join(tempfile.mkdtemp(dir=scratch.name), "t.json.gz"),
                                      memory_hz=a.memory_hz)
                    try:
                        block(True)
                    finally:
                        rldbg.trace.stop(export=False)
    finally:
        ray.shutdown()
        scratch.cleanup()
    print(f"ms per step, {len(hosts)} worker process(es) summed, {a.rounds} x {a.steps} steps a side: untraced -> traced "
          f"(difference), and each hook's calls a traced step")
    listed = {name for name, _ in ROWS}
    rest = sorted((set(sums[0]) | set(sums[1])) - listed - {CPU})   # garbage collections, by generation
    for name, depth in [*ROWS, *((k, 0) for k in rest), (CPU, 0)]:
        label = "  " * depth + name
        if name not in sums[0] and name not in sums[1]:
            if name.endswith(":"):
                print(f"  {label}")
            continue
        u, t = sums[0][name] / steps[0] / 1e6, sums[1][name] / steps[1] / 1e6
        n = f"{calls[name] / steps[1]:6.1f}" if calls[name] else ""
        print(f"  {label:52} {u:8.3f} -> {t:8.3f} ({t - u:+.3f}) {n}")


if __name__ == "__main__":
    main()
