"""The flight recorder as a user meets it, in one run:
    python bench/bench_flight_trainer.py [--steps 3000] [--nan-step 2500] [--window 20] [--every 250]

Runs the reference trainer as a subprocess (`python -m reference_trainer --preset demo`) for `--steps`
steps with `trace.window=N`, and a user's reward code (tests/nan_reward_task.py) that scores one
response NaN on reward rank 1 at `--nan-step`. Every `--every` steps it reads the resident memory of
every process of the job (the driver, where the collector lives, and each Ray worker under it: its
floor over a few seconds, so that a call's transient activations do not count) and
checks that nothing was written to the run folder's traces. Then it prints:
- each process's RSS from step 500 until the trigger beside its value at step 500 (goal: within ±5%);
- what was on disk before the trigger (goal: nothing);
- the trainer's own line for the dump: seconds from the trigger to the trace written (goal ≤ 10 s);
- the first lines of `rldbg report` on the dump (goal: the trigger, the steps ~N before the NaN, and the
  non-finite output with its role, rank, method and step, first).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
FLAT = 0.05
# A worker read mid-call holds that call's activations (tens of MiB here); what the run keeps is
# the floor between calls: the lowest of FLOOR_READS reads over FLOOR_SPAN_S (a few steps).
FLOOR_READS, FLOOR_SPAN_S = 20, 3.0
FROM_STEP = 500


def steps_done(run: Path) -> int:
    try:
        with open(run / "metrics.jsonl") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def job_processes(driver: psutil.Process) -> dict:
    """The driver and every Ray worker process under it (ray.init started the raylet as the driver's
    child, and the raylet starts the workers), named by their process title."""
    out = {driver.pid: ("driver (collector)", driver)}
    for p in driver.children(recursive=True):
        try:
            name = p.name()
            title = " ".join(p.cmdline())[:60]
        except psutil.Error:
            continue
        if name.startswith("ray::") or title.startswith("ray::"):
            out[p.pid] = (f"{title.split()[0].split('.')[0]} (pid {p.pid})", p)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--nan-step", type=int, default=2500)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--every", type=int, default=250, help="read every process's RSS this often (steps)")
    ap.add_argument("--from-step", type=int, default=FROM_STEP, help="judge RSS flat from this step on")
    a = ap.parse_args()
    if not a.from_step < a.nan_step <= a.steps:
        raise SystemExit(f"--nan-step {a.nan_step}: give a step after --from-step {a.from_step} and at most "
                         f"--steps {a.steps}")
    run = Path(tempfile.mkdtemp(prefix="bench-flight-trainer-"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT)])
    cmd = [sys.executable, "-m", "reference_trainer", "--preset", "demo", f"trainer.run_dir={run}",
           "trainer.progress=false", "control.enabled=false", "resources.ray_num_cpus=2",
           f"trainer.total_steps={a.steps}", f"trace.window={a.window}",
           "data.task=nan_reward_task:NanOnceDigitShift",
           f"data.task_args={{n_digits: 1, nan_step: {a.nan_step}, nan_rank: 1}}"]
    log = open(run / "trainer.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    driver = psutil.Process(proc.pid)
    rss: dict = {}
    written = set()
    next_read = a.every
    t0 = time.monotonic()
    while proc.poll() is None:
        done = steps_done(run)
        if done >= next_read and done < a.nan_step:
            floor: dict = {}
            procs = job_processes(driver)
            for _ in range(FLOOR_READS):
                for pid, (name, p) in procs.items():
                    try:
                        floor[pid] = min(floor.get(pid, float("inf")), p.memory_info().rss / 2**20)
                    except psutil.Error:
                        pass
                time.sleep(FLOOR_SPAN_S / FLOOR_READS)
            for pid, v in floor.items():
                rss.setdefault(pid, (procs[pid][0], []))[1].append((done, v))
            written |= {f for f in os.listdir(run) if f.startswith(("flight-", "trace")) or f.endswith(".spill")}
            print(f"  step {done}: {(time.monotonic() - t0) / done * 1e3:.0f} ms a step, RSS "
                  + ", ".join(f"{v[-1][1]:.0f}" for _, v in rss.values()) + " MiB", flush=True)
            next_read = (done // a.every + 1) * a.every
        time.sleep(0.5)
    log.close()
    out = (run / "trainer.log").read_text()
    print(f"flight recorder, trace.window={a.window}, the demo trainer for {a.steps} steps, NaN at step "
          f"{a.nan_step} on reward rank 1 (exit {proc.returncode}, {time.monotonic() - t0:.0f} s):")
    worst = 0.0
    for name, series in rss.values():
        later = [v for s, v in series if s >= a.from_step]
        if not later:
            continue
        base = later[0]
        dev = max(abs(v - base) for v in later) / base
        worst = max(worst, dev)
        print(f"  {name:<40} RSS at step {a.from_step}: {base:7.1f} "
              f"MiB, until the trigger {min(later):7.1f}..{max(later):7.1f} MiB, at most {dev * 100:+.1f}% away")
    print(f"  RSS flat from step {a.from_step} to the trigger (goal within ±{FLAT * 100:.0f}%): worst "
          f"{worst * 100:.1f}%: {'met' if worst <= FLAT else 'NOT met'}")
    print(f"  written before the trigger (goal: nothing): {sorted(written) or 'nothing'}")
    line = next((x for x in out.splitlines() if x.startswith("flight recorder: ") and " s after" in x), None)
    print(f"  the trainer said: {line}")
    dumps = sorted(run.glob("flight-*.json.gz"))
    print(f"  on disk after the run: {[p.name for p in dumps]}")
    if line and " s after" in line:
        took = float(line.rsplit(", ", 1)[1].split(" s after")[0])
        print(f"  trigger to trace written: {took} s (goal ≤ 10 s: {'met' if took <= 10 else 'NOT met'})")
    for p in dumps:
        rep = subprocess.run([sys.executable, "-m", "rldbg", "report", str(p)], capture_output=True, text=True,
                             env=env, timeout=300)
        print(f"  rldbg report {p.name}, first lines:")
        for x in rep.stdout.splitlines()[:6]:
            print(f"    {x}")
    print(f"  run folder: {run}")


if __name__ == "__main__":
    main()
