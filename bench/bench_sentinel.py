"""The non-finite sentinel's cost on the reference trainer's demo, measured in one run:
    python bench/bench_sentinel.py [--steps 8] [--reps 50]

Runs demo steps on 2 ranks and keeps what every registered call returned. For each step it then
times, as CPU time (time.process_time, so other load on the machine does not count), exactly the
checks the sentinel makes for that step: each rank's share of every call's output (the tensors
split as the call's ranks hold them) plus, for a call whose dispatch mode computes its merge (not
the built-in modes, which only concatenate or pick what the ranks checked: the WorkerGroup skips
the driver's check for them), the driver's check of the merged result; repeated --reps times for
resolution. Prints the check's CPU time per step beside the step's wall time and their
ratio (goal ≤ 1%). Wall time on a loaded machine is inflated, so the ratio is also given against
the step time of the fastest step seen.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ["RLDBG_ON_NONFINITE"] = "off"   # the run itself does not check; the bench times the checks

import ray  # noqa: E402

from results import SAVE_HELP, save  # noqa: E402
from rldbg import sentinel  # noqa: E402
from reference_trainer.config import load_config  # noqa: E402
from reference_trainer.data import PromptSource  # noqa: E402
from reference_trainer.roles import build_role_groups  # noqa: E402
from reference_trainer.single_controller import shutdown_groups  # noqa: E402
from reference_trainer.tasks import build_tokenizer, get_task  # noqa: E402
from reference_trainer.trainer import train_step  # noqa: E402

GOAL = 0.01


class _Part:   # one rank's share of a DataProto-like output
    def __init__(self, tensors):
        self.tensors = tensors


def rank_parts(result, world: int) -> list:
    inner = getattr(result, "tensors", None)
    if not isinstance(inner, dict) or not inner:
        return [result] * world
    return [_Part({k: t.chunk(world)[r] for k, t in inner.items()}) for r in range(world)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--reps", type=int, default=50, help="repetitions of each step's checks")
    ap.add_argument("--save", action="store_true", help=SAVE_HELP)
    a = ap.parse_args()
    scratch = tempfile.TemporaryDirectory(prefix="rldbg-bench-sentinel-")   # the run dir, removed at the end
    cfg = load_config("demo", overrides=["trace.enabled=false", "control.enabled=false", "trainer.progress=false",
                                         f"trainer.run_dir={scratch.name}"])
    ray.init(address="local", num_cpus=2, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    groups = build_role_groups(cfg)
    captured: list = []
    for g in groups.values():
        for name, reg in g.methods.items():
            def wrap(fn, world=g.world_size, merged=not reg.mode.merges_only):
                def call(*args, **kwargs):
                    out = fn(*args, **kwargs)
                    captured.append((out, world, merged))
                    return out
                return call
            setattr(g, name, wrap(getattr(g, name)))
    try:
        for g in groups.values():
            g.init_model()
        src = PromptSource(get_task(cfg.data.task, **cfg.data.task_args), build_tokenizer(),
                           cfg.data.prompts_per_step, cfg.data.group_size, 0)
        train_step(0, src.batch(0), groups["actor"], groups.get("critic"), groups["reward"], cfg)  # warm-up
        walls, cpus, tensors = [], [], []
        for step in range(1, a.steps + 1):
            captured.clear()
            t0 = time.perf_counter()
            train_step(step, src.batch(step), groups["actor"], groups.get("critic"), groups["reward"], cfg)
            walls.append(time.perf_counter() - t0)
            checks = []
            for out, world, merged in captured:
                checks += rank_parts(out, world) + ([out] if merged else [])
            tensors.append(sum(len(list(sentinel._tensors(c))) for c in checks))
            c0 = time.process_time()
            for _ in range(a.reps):
                for c in checks:
                    assert sentinel.find(c) is None
            cpus.append((time.process_time() - c0) / a.reps)
    finally:
        shutdown_groups(groups.values())
        ray.shutdown()
        scratch.cleanup()
    cpu, wall, fastest = statistics.median(cpus), statistics.median(walls), min(walls)
    print(f"steps {a.steps}, checks per step: {len(checks)} outputs, {statistics.median(tensors):.0f} floating tensors")
    print(f"sentinel CPU time per step: {cpu * 1e3:.3f} ms (median; {a.reps} reps each)")
    print(f"step wall time: median {wall * 1e3:.1f} ms, fastest {fastest * 1e3:.1f} ms")
    print(f"ratio (check CPU / step): {cpu / wall * 100:.3f}% of the median step, "
          f"{cpu / fastest * 100:.3f}% of the fastest; goal <= {GOAL * 100:.0f}% -> "
          f"{'met' if cpu / fastest <= GOAL else 'NOT met'}")
    if a.save:
        save("bench_sentinel", a, {"outputs_per_step": len(checks), "floating_tensors_per_step": statistics.median(tensors),
                                   "cpu_ms_per_step": round(cpu * 1e3, 3), "step_ms_median": round(wall * 1e3, 1),
                                   "step_ms_fastest": round(fastest * 1e3, 1), "share_pct": round(cpu / wall * 100, 3),
                                   "share_pct_of_fastest": round(cpu / fastest * 100, 3)},
             goal=f"sentinel CPU <= {GOAL * 100:.0f}% of the step's wall time")


if __name__ == "__main__":
    main()
