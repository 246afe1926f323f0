"""Overhead of rldbg's VeRL integration on real VeRL worker-group calls, measured in one run.

    python bench/bench_verl.py [--rounds 6] [--calls 40] [--rows 64]

Two groups of 2 CPU workers of the same class on a fresh loopback cluster: `plain` is created
before rldbg.integrations.verl.install() (driver unhooked, workers without RLDBG_VERL), `hooked`
after it. Per call the median wall time of `update` (DP_COMPUTE_PROTO over a DataProto of --rows
rows of 64 float32) and of `noop` (ONE_TO_ALL, no data) is measured in alternating blocks:
first hooked-but-untraced vs plain, then with tracing on (memory sampler off, as bench_trace does
for hooks) traced vs plain. Ratios > 1 mean the integration costs time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from results import SAVE_HELP, save

HERE = str(Path(__file__).resolve().parent)

try:
    from verl import DataProto
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register
except ImportError:   # pragma: no cover - a clear line instead of a traceback
    sys.exit("bench_verl: verl is not installed (pip install -e '.[verl]')")


class BenchWorker(Worker):
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update(self, data: DataProto):
        return DataProto.from_dict({"y": data.batch["x"] + 1})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def noop(self):
        return self.rank


def _group(cls):
    import ray
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    return RayWorkerGroup(RayResourcePool([2], use_gpu=False, max_colocate_count=1),
                          RayClassWithInitArgs(cls=ray.remote(cls)))


def _time(fn, calls: int) -> float:
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _compare(label, a, b, rounds, calls):
    """a vs b in alternating blocks; prints medians (ms) and the ratio a/b per method, and returns
    {method: ratio}."""
    ratios = {}
    for method, fa, fb in (("update", a[0], b[0]), ("noop", a[1], b[1])):
        xs, ys = [], []
        for _ in range(rounds):
            xs.append(_time(fa, calls))
            ys.append(_time(fb, calls))
        ma, mb = statistics.median(xs), statistics.median(ys)
        print(f"{label:<28} {method:<7} {ma * 1e3:8.2f} ms vs plain {mb * 1e3:8.2f} ms   ratio {ma / mb:5.3f}")
        ratios[method] = round(ma / mb, 3)
    return ratios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--save", action="store_true", help=SAVE_HELP)
    a = ap.parse_args()
    if a.rounds < 1 or a.calls < 1 or a.rows < 2:
        print(f"bench_verl: --rounds {a.rounds} / --calls {a.calls} must be >= 1 and --rows {a.rows} >= 2",
              file=sys.stderr)
        return 2
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ.pop("RLDBG_VERL", None)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    import ray
    import torch

    from bench_verl import BenchWorker as Importable   # by reference, so workers import it afresh

    ray.init(address="local", num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=False,
             log_to_driver=False)
    try:
        plain = _group(Importable)
        import rldbg.integrations.verl as rv
        import rldbg.trace

        rv.install()
        hooked = _group(Importable)
        data = DataProto.from_dict({"x": torch.zeros(a.rows, 64)})
        p = (lambda: plain.update(data), plain.noop)
        h = (lambda: hooked.update(data), hooked.noop)
        for f in p + h:   # warm both groups
            f()
        print(f"verl group calls, 2 CPU ranks, {a.rounds} blocks x {a.calls} calls, median per call")
        untraced = _compare("integration on, untraced", h, p, a.rounds, a.calls)
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_verl_{os.getpid()}.json.gz")
        rldbg.trace.start(path, memory_hz=0)
        try:
            traced = _compare("integration on, traced", h, p, a.rounds, a.calls)
        finally:
            import shutil

            shutil.rmtree(rldbg.trace.stop(export=False) or "", ignore_errors=True)   # the spill dir
    finally:
        ray.shutdown()
    if a.save:
        save("bench_verl", a, {**{f"untraced_{m}_ratio": r for m, r in untraced.items()},
                               **{f"traced_{m}_ratio": r for m, r in traced.items()}}, goal="hooked/plain: none stated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
