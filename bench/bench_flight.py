"""The flight recorder over a long run (trace.window=N), measured in one run:
    python bench/bench_flight.py [--steps 3000] [--window 20] [--every 250]

The demo's workers (bench/demo_steps.py) train `--steps` steps with the flight recorder on. Every
`--every` steps it reads the resident memory of every process of the job (the driver, where the
collector lives, and each worker) and checks that nothing was written to disk. It prints each
process's RSS from step 500 on beside its value at step 500 (goal: flat, within ±5%), then asks
for a dump and prints the time from the trigger to the trace written (goal ≤ 10 s) and the steps
the dump covers. The traced/untraced step ratio in window mode is bench_trace_overhead.py's
(`--window 20`), goal ≤ 1.01 on a CPU.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray  # noqa: E402

import rldbg.trace  # noqa: E402
from demo_steps import DemoSteps  # noqa: E402
from reference_trainer.config import load_config  # noqa: E402

FLAT = 0.05
FROM_STEP = 500


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--every", type=int, default=250, help="read every process's RSS this often (steps)")
    ap.add_argument("--num-cpus", type=int, default=2)
    a = ap.parse_args()
    if a.steps <= FROM_STEP:
        raise SystemExit(f"--steps {a.steps}: the flatness is judged from step {FROM_STEP} on; give more")
    run_dir = tempfile.mkdtemp(prefix="bench-flight-")
    cfg = load_config("demo", overrides=["trace.enabled=false", "control.enabled=false", "trainer.progress=false",
                                         f"trainer.run_dir={run_dir}"])
    ray.init(address="local", num_cpus=a.num_cpus, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    trace = os.path.join(run_dir, "trace.json.gz")
    try:
        with DemoSteps(cfg) as run:
            rldbg.trace.start(trace, memory_hz=10.0, window=a.window)
            pids = {"driver (collector)": os.getpid()}
            for role, g in run.groups.items():
                for rank, h in enumerate(g.hosts):
                    pid = ray.get(h.pid.remote())
                    if pid not in pids.values():   # a process serving several roles is read once
                        pids[f"{role} rank {rank} (pid {pid})"] = pid
            rss: dict = {name: [] for name in pids}
            written = []
            t0 = time.perf_counter()
            for step in range(a.steps):
                run.step()
                if (step + 1) % a.every == 0:
                    for name, pid in pids.items():
                        rss[name].append((step + 1, rss_mib(pid)))
                    written += [f for f in os.listdir(run_dir) if f.startswith("flight-") or f.endswith(".spill")]
                    print(f"  step {step + 1}: {(time.perf_counter() - t0) / (step + 1) * 1e3:.0f} ms a step, "
                          f"RSS " + ", ".join(f"{v[-1][1]:.0f}" for v in rss.values()) + " MiB", flush=True)
            asked = time.monotonic()
            st = rldbg.trace.dump("manual", wait_s=60)
            took = time.monotonic() - asked
            rldbg.trace.stop()
    finally:
        ray.shutdown()
    print(f"flight recorder, trace.window={a.window}, {a.steps} steps of the demo:")
    worst = 0.0
    for name, series in rss.items():
        base = next(v for s, v in series if s >= FROM_STEP)
        later = [v for s, v in series if s >= FROM_STEP]
        dev = max(abs(v - base) for v in later) / base
        worst = max(worst, dev)
        print(f"  {name:<34} RSS at step {FROM_STEP}: {base:7.1f} MiB, from then on {min(later):7.1f}..{max(later):7.1f} "
              f"MiB, at most {dev * 100:+.1f}% away")
    print(f"  RSS flat from step {FROM_STEP} on (goal within ±{FLAT * 100:.0f}%): worst {worst * 100:.1f}%: "
          f"{'met' if worst <= FLAT else 'NOT met'}")
    print(f"  written before the trigger (goal: nothing): {sorted(set(written)) or 'nothing'}")
    print(f"  dump: {st['state']} {st['path']}, {st['events']} events from {st['processes']} processes; "
          f"trigger to file {st['seconds']} s as the collector saw it, {took:.2f} s as the caller waited "
          f"(goal ≤ 10 s: {'met' if took <= 10 else 'NOT met'})")
    from rldbg.trace.report import analyse
    rec = analyse(st["path"])["recorded"]
    print(f"  the dump covers steps {rec['steps']} (window {a.window})")


if __name__ == "__main__":
    main()
