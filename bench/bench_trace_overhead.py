"""Tracing overhead on the reference trainer's demo, measured in one run:
    python bench/bench_trace_overhead.py [--rounds 4] [--steps 20] [--dump FILE] [KEY=VALUE ...]
    python bench/bench_trace_overhead.py --pool FILE [FILE ...]   # the rounds of earlier --dump runs together
    python bench/bench_trace_overhead.py --rounds 40 resources.device=cuda resources.n_ranks=1   # a GPU

Builds the demo's worker groups once, then alternates blocks of untraced and traced steps
(tracing started and stopped around each traced block, outside the timed region) so machine
drift hits both sides alike. Prints the median step time of each and their ratio (goal ≤ 1.01 on a
CPU, ≤ 1.02 on a GPU),
with bootstrap intervals of that ratio and of the ratio of the means: a step's time scatters by
several % on a shared machine, so a run's ratio says "met" or "not met" only when its interval
lies on one side of the goal (here, 200 steps a side still left the median ratio within ±4%).
The same steps are also taken as pairs, each traced block beside the untraced block next to it
(which goes first alternates), resampled by round: drift between rounds then leaves the spread.
A block is 20 steps: tracing's start and stop around each traced block take about 1 s (stop waits
for every process's next shipping round), so longer blocks buy more timed steps a minute; 30
rounds of 20 resolved the paired ratio as well as 60 rounds of 5 (±2%) in 60% of the time.
`--pool` puts the rounds of several runs' dumps together, one paired ratio with its interval (each
run's rounds resampled within it): runs of the same code on one machine are more rounds of one
experiment, though a difference between the runs themselves is not in that interval.

`--aa` runs the same alternation with neither side traced: its ratios are this machine's noise
alone, the resolution a run of that length has (on a 2-core VM, with 5-step blocks, about ±2.5% for
40 rounds, wider than the 1% goal; about ±1.5% for 120 rounds; 30 rounds of 20 steps once gave
0.986 (0.968-1.006) paired, neither side traced). Each block also reports how long the training processes' main threads waited
for a core, and tracing's own CPU measured on its threads (bench/tracing_threads.py), which
resolves where the step ratio cannot.

Then tracing's standing cost, which does resolve: the CPU that every process of the job (driver,
workers, Ray's own; the collector is threads of the driver) uses per second while the job sits
idle, untraced and traced in alternating windows. It is what tracing takes from the cores
whatever the step does (memory sampling, shipping rounds, the collector's threads); a step that
keeps both cores busy loses about that share of the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for bootstrap next to this file
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray  # noqa: E402

import rldbg.trace  # noqa: E402
from bootstrap import grouped_interval, interval, ratio_interval, verdict  # noqa: E402
from demo_steps import DemoSteps  # noqa: E402
from tracing_threads import RUN_DELAY, cpu_ns, schedstat, tracing_threads, used_by_label  # noqa: E402
from reference_trainer.config import load_config  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--flush", type=float, default=None, help="flush interval, s (default: rldbg's)")
    ap.add_argument("--aa", action="store_true",
                    help="trace neither side: the ratios then show this machine's noise alone, the bench's resolution")
    ap.add_argument("--dump", help="write the rounds' step times and every timed step's record here (JSON)")
    ap.add_argument("--pool", nargs="+", metavar="DUMP", help="run nothing: the paired ratio of these --dump files' "
                                                              "rounds together")
    ap.add_argument("--memory-hz", type=float, default=10.0)
    ap.add_argument("--idle-seconds", type=float, default=4.0, help="length of each idle window")
    ap.add_argument("--idle-rounds", type=int, default=3, help="untraced/traced idle window pairs")
    ap.add_argument("--num-cpus", type=int, default=2, help="the local Ray cluster's CPUs")
    ap.add_argument("--window", type=int, default=0,
                    help="trace as the flight recorder does (trace.window=N: the last N steps in memory)")
    ap.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                    help="demo config overrides, e.g. resources.device=cuda resources.n_ranks=1 on a GPU")
    a = ap.parse_args()
    if a.pool:
        return pool(ap, a.pool)
    if a.rounds < 1 or a.steps < 1:
        ap.error(f"--rounds and --steps take a count of 1 or more, got {a.rounds} and {a.steps}")
    if a.dump and not os.path.isdir(os.path.dirname(os.path.abspath(a.dump))):
        ap.error(f"--dump {a.dump!r}: its folder does not exist (the dump is written at the end of the run)")
    with tempfile.TemporaryDirectory(prefix="rldbg-bench-overhead-") as scratch:   # run dir and traces, removed at the end
        a.scratch = scratch
        measure(a)


def measure(a) -> None:
    cfg = load_config("demo", overrides=["trace.enabled=false", "control.enabled=false", "trainer.progress=false",
                                         f"trainer.run_dir={a.scratch}/run", *a.overrides])
    ray.init(address="local", num_cpus=a.num_cpus, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    # The project's goals: a traced step within 1% of an untraced one on a CPU, 2% on a GPU.
    on_gpu = cfg.resources.device == "cuda" or (cfg.resources.device == "auto" and ray.cluster_resources().get("GPU"))
    a.goal = 1.02 if on_gpu else 1.01
    try:
        # The demo's workers after its SFT warm start, its prompts step by step.
        with DemoSteps(cfg) as run:
            step_ratio(run, a)
            if not a.aa:
                standing_cost(run.step, a.memory_hz, a.idle_seconds, a.idle_rounds, a.flush, a.scratch)
    finally:
        ray.shutdown()


def step_ratio(run: DemoSteps, a) -> None:
    """The demo's step time untraced and traced, alternating blocks on one set of workers."""
    cpu = []   # per block: (traced?, CPU ns the whole job used over it)
    steps = []   # every timed step: traced?, seconds, its record (tokens, response length, phases)
    waits = []   # per block: (traced?, ns the training processes waited for a core)
    trainers = {"driver"} | {n for _, n in job_cpu_ns() if n.startswith("ray::") and "Collector" not in n
                              and n not in ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent")}
    by_proc = ({}, {})   # untraced, traced: {process name: CPU ns over all blocks}
    by_main = ({}, {})   # the same, of each process's main thread only
    own: dict = {}       # tracing's own threads over the traced blocks: {label: CPU ns}
    hosts = [h for g in run.groups.values() for h in g.hosts]

    def block(traced: bool = False) -> list[float]:
        # One step first, untimed, on both sides: a traced run's workers find the collector,
        # start their threads and time their clocks once, on their first traced call; a bench
        # that starts tracing for each block must not charge that to the block's steps.
        run.step()
        out = []
        mine = tracing_threads(hosts) if traced and not a.aa else []
        c0, w0, t0_own, m0 = job_cpu_ns(), main_wait_ns(), cpu_ns(mine), main_thread_ns()
        for _ in range(a.steps):
            t0 = time.perf_counter()
            rec = run.step()
            out.append(time.perf_counter() - t0)
            steps.append({"round": a.round, "traced": traced, "s": out[-1], **{k: v for k, v in rec.items() if isinstance(v, (int, float))}})
        used, on_main = cpu_since(c0), cpu_since(m0, main_thread_ns)
        cpu.append((traced, sum(used.values())))
        for label, ns in used_by_label(mine, t0_own).items():
            own[label] = own.get(label, 0) + ns
        waited = cpu_since(w0, main_wait_ns)
        waits.append((traced, sum(ns for name, ns in waited.items() if name in trainers)))
        for name, ns in used.items():
            by_proc[traced][name] = by_proc[traced].get(name, 0) + ns
        for name, ns in on_main.items():
            by_main[traced][name] = by_main[traced].get(name, 0) + ns
        return out

    a.round = None
    block()  # warm-up: first calls pay for imports and allocations
    for kept in (cpu, waits, steps, by_proc[0], by_main[0]):   # the warm-up block counts in no figure
        kept.clear()
    extra = {} if a.flush is None else {"flush_interval": a.flush}
    if a.window:
        extra["window"] = a.window

    def traced_block() -> list[float]:
        if a.aa:   # the control: the "traced" side untraced too, so its ratio is the machine's noise alone
            return block(traced=True)
        rldbg.trace.start(os.path.join(tempfile.mkdtemp(dir=a.scratch), "overhead.json.gz"), memory_hz=a.memory_hz,
                          **extra)
        try:
            return block(traced=True)
        finally:
            rldbg.trace.stop(export=False)

    rounds = []   # (untraced steps, traced steps) measured next to each other
    for r in range(a.rounds):
        a.round = r
        # Which side goes first alternates: a machine speeding up or slowing down within the
        # run then favours neither.
        if r % 2:
            on_r = traced_block()
            rounds.append((block(), on_r))
        else:
            rounds.append((block(), traced_block()))
    if a.dump:
        with open(a.dump, "w") as f:
            json.dump({"goal": a.goal, "steps_per_block": a.steps, "rounds": rounds, "steps": steps}, f)
    off = [x for o, _ in rounds for x in o]
    on = [x for _, t in rounds for x in t]
    m_off, m_on = statistics.median(off), statistics.median(on)
    if a.aa:
        print("A/A control: both sides untraced; each ratio below is noise, its interval the bench's resolution")
    print(f"demo step, median of {len(off)} steps each: untraced {m_off * 1e3:.1f} ms, "
          f"traced {m_on * 1e3:.1f} ms, ratio {m_on / m_off:.3f} (goal ≤ {a.goal})")
    print(f"  means: untraced {statistics.mean(off) * 1e3:.1f} ms, traced {statistics.mean(on) * 1e3:.1f} ms, "
          f"ratio {statistics.mean(on) / statistics.mean(off):.3f}")
    for what, stat in (("median", statistics.median), ("mean", statistics.mean)):
        lo, hi = ratio_interval(off, on, stat)
        print(f"  90% bootstrap interval of the {what} ratio, steps resampled: {lo:.3f} .. {hi:.3f}; "
              f"goal <= {a.goal}: {verdict(lo, hi, a.goal, at_least=False)}")
    # The same data as pairs: each traced block against the untraced block beside it, the
    # rounds resampled as units, so the machine's drift between rounds leaves the spread.
    paired = paired_ratio(rounds)
    lo, hi = interval(rounds, paired_ratio)
    print(f"  paired by round (all traced time over all untraced time, {len(rounds)} rounds resampled as pairs): "
          f"{paired:.3f}, 90% interval {lo:.3f} .. {hi:.3f}; goal <= {a.goal}: {verdict(lo, hi, a.goal, at_least=False)}")
    per = [statistics.median(t) / statistics.median(o) for o, t in rounds]
    lo, hi = interval(per, statistics.median)
    print(f"  median of the rounds' own ratios: {statistics.median(per):.3f}, 90% interval {lo:.3f} .. {hi:.3f}")
    # CPU rather than wall time: what the whole job (driver, workers, collector, Ray's own
    # processes) spent on each block, so waiting for a core another tenant holds does not count.
    c_off = [c for t, c in cpu if not t]
    c_on = [c for t, c in cpu if t]
    pairs = list(zip(c_off, c_on))
    ratio = sum(c_on) / sum(c_off)
    lo, hi = interval(pairs, lambda ps: sum(y for _, y in ps) / sum(x for x, _ in ps))
    print(f"  the job's CPU per step: untraced {sum(c_off) / len(off) / 1e6:.1f} ms, traced {sum(c_on) / len(on) / 1e6:.1f} ms, "
          f"ratio {ratio:.3f}, 90% interval {lo:.3f} .. {hi:.3f} (rounds resampled as pairs)")
    if own:
        mine = sum(own.values()) / len(on) / 1e6
        print(f"  tracing's own threads, measured where they run: {mine:.2f} ms a step, "
              f"{100 * mine / (sum(c_on) / len(on) / 1e6):.2f}% of the traced job's CPU ("
              + ", ".join(f"{k} {v / len(on) / 1e6:.2f}" for k, v in sorted(own.items())) + ")")
    # Time the training processes (driver, workers) were runnable but kept off a core: what
    # every other thread on the machine, tracing's included, cost the step's critical path.
    w_off = [w for t, w in waits if not t]
    w_on = [w for t, w in waits if t]
    lo, hi = interval(list(zip(w_off, w_on)), lambda ps: (sum(y for _, y in ps) - sum(x for x, _ in ps)) / len(on) / 1e6)
    print(f"  the training threads' wait for a core, per step: untraced {sum(w_off) / len(off) / 1e6:.2f} ms, "
          f"traced {sum(w_on) / len(on) / 1e6:.2f} ms, {(sum(w_on) - sum(w_off)) / len(on) / 1e6:+.2f} ms "
          f"(90% interval {lo:+.2f} .. {hi:+.2f}; main threads of {', '.join(sorted(trainers))})")
    # Where a traced step's extra CPU goes, by process (and of that, its main thread, where recording
    # runs and where a process's other threads take the GIL from): ms per step on each side.
    names = sorted(set(by_proc[0]) | set(by_proc[1]),
                   key=lambda n: -abs(by_proc[1].get(n, 0) / len(on) - by_proc[0].get(n, 0) / len(off)))
    for name in names:
        u, t = by_proc[0].get(name, 0) / len(off) / 1e6, by_proc[1].get(name, 0) / len(on) / 1e6
        mu, mt = by_main[0].get(name, 0) / len(off) / 1e6, by_main[1].get(name, 0) / len(on) / 1e6
        print(f"    {name:<32} {u:7.2f} -> {t:7.2f} ms a step ({t - u:+.2f}; main thread {mu:.2f} -> {mt:.2f}, "
              f"{mt - mu:+.2f})")


def _job_processes():
    """(pid, name) of this process ("driver", where the collector lives) and every process it
    started (Ray's GCS and raylet, the workers)."""
    import psutil
    me = psutil.Process()
    for p in [me] + me.children(recursive=True):
        try:
            yield p.pid, "driver" if p.pid == me.pid else p.name()
        except psutil.Error:
            pass


def job_cpu_ns() -> dict:
    """{(pid, name): CPU ns used so far} of each of the job's processes, all its threads summed,
    from schedstat: nanoseconds, where psutil's cpu_times counts 10 ms ticks."""
    out = {}
    for pid, name in _job_processes():
        try:
            out[(pid, name)] = sum(schedstat(pid, int(tid)) for tid in os.listdir(f"/proc/{pid}/task"))
        except (OSError, ValueError):
            pass   # a process or thread that ended meanwhile
    return out


def main_thread_ns(field: int = 0) -> dict:
    """{(pid, name): a schedstat field of the main thread (where the driver and a Ray actor's calls
    run) so far} of each of the job's processes: 0, ns on a core; RUN_DELAY, ns runnable but
    waiting for one."""
    out = {}
    for pid, name in _job_processes():
        try:
            out[(pid, name)] = schedstat(pid, pid, field)
        except (OSError, ValueError):
            pass
    return out


def main_wait_ns() -> dict:
    return main_thread_ns(RUN_DELAY)


def cpu_since(before: dict, now=job_cpu_ns) -> dict:
    """{process name: ns counted since `now()` gave `before`}, summed over same-named
    processes; a process started in between is left out (it would count its start-up)."""
    out: dict = {}
    for key, ns in now().items():
        if key in before:
            out[key[1]] = out.get(key[1], 0) + ns - before[key]
    return out


def _window(seconds: float) -> dict:
    """{name: ms of CPU a second} over `seconds` of doing nothing here, per process name."""
    a = job_cpu_ns()
    time.sleep(seconds)
    return {name: ns / seconds / 1e6 for name, ns in cpu_since(a).items()}


def standing_cost(one_step, memory_hz: float, seconds: float, rounds: int, flush, scratch: str) -> None:
    """Tracing's CPU per second with the job idle: alternating untraced and traced windows; one
    step before each window (outside it) so the workers have looked up the collector, or gone
    quiet after a stop, before it is measured. An actor that does nothing runs through every
    window: what it costs is what the collector cost while it was a Ray actor of its own (until
    stop 31; it is threads of the driver now, trace/server.py)."""
    idle = IdleActor.remote()
    ray.get(idle.ready.remote())
    off, on = [], []
    for _ in range(rounds):
        one_step()
        time.sleep(0.5)
        off.append(_window(seconds))
        extra = {} if flush is None else {"flush_interval": flush}
        rldbg.trace.start(os.path.join(tempfile.mkdtemp(dir=scratch), "standing.json.gz"), memory_hz=memory_hz, **extra)
        try:
            one_step()
            time.sleep(1.0)   # the collector's start-up and the workers' connect round are not standing costs
            on.append(_window(seconds))
        finally:
            rldbg.trace.stop(export=False)
    names = sorted({n for w in off + on for n in w})
    per = {n: (statistics.mean(w.get(n, 0.0) for w in off), statistics.mean(w.get(n, 0.0) for w in on)) for n in names}
    t_off = [sum(w.values()) for w in off]
    t_on = [sum(w.values()) for w in on]
    d = statistics.mean(t_on) - statistics.mean(t_off)
    cores = len(os.sched_getaffinity(0))
    print(f"tracing's standing CPU, job idle, {rounds} x {seconds:g} s windows a side (memory sampling {memory_hz:g} Hz): "
          f"untraced {statistics.mean(t_off):.1f} ms/s (windows {', '.join(f'{x:.1f}' for x in t_off)}), "
          f"traced {statistics.mean(t_on):.1f} ms/s ({', '.join(f'{x:.1f}' for x in t_on)}): "
          f"+{d:.1f} ms of CPU a second, {d / (10 * cores):.2f}% of this machine's {cores} cores")
    for n, (x, y) in sorted(per.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0])):
        if abs(y - x) >= 0.2:
            print(f"  {n:32s} {x:6.2f} -> {y:6.2f} ms/s ({y - x:+.2f})")
    floor = [w.get("ray::IdleActor", 0.0) for w in off + on]
    print(f"  an idle Ray actor that does nothing (what the collector cost as an actor, before it moved "
          f"into the driver): "
          f"{statistics.mean(floor):.2f} ms/s (windows {', '.join(f'{x:.1f}' for x in floor)})")
    ray.kill(idle)


@ray.remote(num_cpus=0)
class IdleActor:
    def ready(self) -> bool:
        return True


def paired_ratio(rounds: list) -> float:
    """Traced time over untraced time, summed over the rounds given."""
    return sum(sum(t) for _, t in rounds) / sum(sum(o) for o, _ in rounds)


def pool(ap, paths: list) -> None:
    """The paired ratio of each dump and of all their rounds together (resampled as pairs)."""
    runs = []
    for path in paths:
        try:
            with open(path) as f:
                d = json.load(f)
            runs.append((path, float(d["goal"]), [(list(o), list(t)) for o, t in d["rounds"]]))
            if not runs[-1][2] or not all(o and t for o, t in runs[-1][2]):
                raise ValueError("no rounds, or a round without steps")
        except (OSError, ValueError, TypeError, KeyError) as e:
            ap.error(f"--pool {path!r}: not a dump of this bench ({type(e).__name__}: {e}); write one with --dump FILE")
    goals = {goal for _, goal, _ in runs}
    if len(goals) != 1:
        ap.error(f"--pool: the dumps measured against different goals {sorted(goals)} (a CPU run and a GPU run?)")
    goal = goals.pop()
    for path, _, rounds in runs:
        lo, hi = interval(rounds, paired_ratio)
        print(f"{path}: {len(rounds)} rounds, paired {paired_ratio(rounds):.3f}, 90% interval {lo:.3f} .. {hi:.3f}")
    every = [r for _, _, rounds in runs for r in rounds]
    # Each run's rounds are resampled within it (every run keeps its weight). The interval is the
    # rounds' scatter; a difference between runs (the machine's state that day) is not in it, so
    # read it beside the runs' own figures above.
    lo, hi = grouped_interval([rounds for _, _, rounds in runs], paired_ratio)
    print(f"pooled, {len(every)} rounds of {len(runs)} run{'s' if len(runs) > 1 else ''}, resampled as pairs within "
          f"their runs: paired {paired_ratio(every):.3f}, 90% interval {lo:.3f} .. {hi:.3f}; goal <= {goal}: "
          f"{verdict(lo, hi, goal, at_least=False)}")


if __name__ == "__main__":
    main()
