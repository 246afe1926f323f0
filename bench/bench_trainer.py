"""reference_trainer speed and learning, and TRL's GRPOTrainer on the same problem, in one run.

Run on demand (not a test; TRL lives only in /tmp/trlvenv, which also sees the repo):
    /tmp/trlvenv/bin/python bench/bench_trainer.py [--steps 20] [--budget 150] [--parts throughput,converge]

throughput: the demo preset for --steps steps on 2 ranks and on 1 rank, with offload as the preset
    has it and with offload off, each run between two TRL GRPOTrainer runs of the same
    model/tokenizer/prompts/reward/batch (TRL first, then after each of ours), so drift on this
    shared machine hits both sides. Identical passes: no reference forward on either side unless
    --ref-forward ours. Prints tokens/s, s/step and our per-phase step times (means over steps
    after the first 2), and our/TRL throughput ratios against the two TRL runs around each of ours
    (>1: we are faster; goal ≥ 1.0 at 2 ranks).
converge: GRPO (the preset) and PPO (algorithm.adv_estimator=gae) for --budget steps each; prints
    the first step where the 5-step moving average of reward/mean is ≥ 0.9, and the seconds of
    training steps up to it, or "not reached in N steps".

Token definition, the same for both trainers: prompt + response tokens with attention mask 1 —
prompt without padding (incl. <bos>) + response up to and including the first <eos>. Ours: the
record's "tokens" (attention_mask.sum()); TRL: the increase of state.num_input_tokens_seen.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for trl_grpo next to this file
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from reference_trainer.config import load_config  # noqa: E402
from reference_trainer.runtime import start_ray, stop_ray  # noqa: E402
from reference_trainer.trainer import fit  # noqa: E402

NO_OFFLOAD = ["offload.optimizer=false", "offload.grads=false"]
SKIP = 2  # first steps left out of means: allocator, thread pools and caches warm up there
PHASES = ("rollout", "reward", "log_prob", "advantage", "update_critic", "update_actor", "step")


def demo_config(*overrides: str):
    run_dir = tempfile.mkdtemp(prefix="bench-trainer-")
    base = ["trace.enabled=false", "trainer.progress=false", f"trainer.run_dir={run_dir}"]
    return load_config("demo", overrides=base + list(overrides))


def run_ours(cfg, verbose: bool) -> tuple[list[dict], float]:
    """fit() with its per-step console lines swallowed unless --verbose; returns (records, wall s)."""
    sink = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    t0 = time.perf_counter()
    with sink:
        history = fit(cfg)
    return history, time.perf_counter() - t0


def steady(history: list[dict]) -> list[dict]:
    return history[SKIP:] if len(history) > SKIP else history


def our_figures(history: list[dict], batch: int) -> dict:
    h = steady(history)
    step_s = sum(r["time/step"] for r in h)
    return {"s_per_step": step_s / len(h),
            "tokens_per_s": sum(r["tokens"] for r in h) / step_s,
            # response_length is the mean response_mask row sum: × batch gives completion tokens
            "completion_tokens_per_s": sum(r["response_length"] * batch for r in h) / step_s,
            "phases": {p: statistics.mean(r.get(f"time/{p}", 0.0) for r in h) for p in PHASES
                       if any(f"time/{p}" in r for r in h)}}


def trl_figures(clock) -> dict:
    n = len(clock.seconds)
    keep = range(SKIP, n) if n > SKIP else range(n)
    secs = sum(clock.seconds[i] for i in keep)
    return {"s_per_step": secs / len(keep),
            "tokens_per_s": sum(clock.tokens[i] for i in keep) / secs,
            "completion_tokens_per_s": sum(clock.completion_tokens[i] for i in keep) / secs}


def print_ours(label: str, f: dict, wall: float, n_steps: int) -> None:
    print(f"  {label}: {f['tokens_per_s']:7.0f} tokens/s  {f['completion_tokens_per_s']:6.0f} completion tokens/s  "
          f"{f['s_per_step']:.3f} s/step   (fit() wall {wall:.1f} s for {n_steps} steps incl. set-up + SFT)")
    print("      per phase, s/step: " + "  ".join(f"{k} {v:.3f}" for k, v in f["phases"].items()))


def throughput(args) -> None:
    steps = args.steps
    print(f"== throughput: demo preset (GRPO, digit_shift, llama-tiny), {steps} steps per run, "
          f"means over steps {SKIP}..{steps - 1} ==")
    cfg2 = demo_config(f"trainer.total_steps={steps}")
    batch = cfg2.data.prompts_per_step * cfg2.data.group_size
    print(f"  batch: {cfg2.data.prompts_per_step} prompts × {cfg2.data.group_size} = {batch} completions/step, "
          f"max_new_tokens {cfg2.rollout.max_new_tokens}, temperature {cfg2.rollout.temperature}, lr {cfg2.actor.lr}")
    print("  tokens = prompt + response tokens with attention mask 1 (no padding; response up to and incl. <eos>)")

    try:
        from trl_grpo import run_trl_grpo
        import trl
    except ImportError as e:  # the system python has no TRL on purpose
        run_trl_grpo, trl_error = None, f"TRL not available in {sys.executable}: {e}"

    if args.ref_forward == "neither":
        ref = ["actor.kl_metric=false"]
        print("  identical passes: a reference forward on NEITHER side (ours: actor.kl_metric=false, no KL term; "
              "TRL: beta=0 loads no reference model); old log-probs on neither (one on-policy mini-batch)")
    else:
        ref = []
        print("  NOT identical: ours runs a reference forward each step for the kl_to_ref metric "
              "(actor.kl_metric=true); TRL at beta=0 runs none")
    trl_runs = []

    def trl_block(tag: str) -> None:
        if run_trl_grpo is None:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TRL/transformers deprecation chatter, not results
            t0 = time.perf_counter()
            clock = run_trl_grpo(cfg2, steps, threads=args.trl_threads)
        trl_runs.append(trl_figures(clock))
        f = trl_runs[-1]
        print(f"  TRL {trl.__version__} GRPOTrainer ({tag}; one process, no Ray, torch threads={args.trl_threads}): "
              f"{f['tokens_per_s']:7.0f} tokens/s  {f['completion_tokens_per_s']:6.0f} completion tokens/s  "
              f"{f['s_per_step']:.3f} s/step   (wall {time.perf_counter() - t0:.1f} s)")

    # TRL runs before, between and after ours: each of our runs is compared with the mean of the two
    # TRL runs around it, so that load drifting on this shared machine hits both sides alike.
    t0 = time.perf_counter()
    started = start_ray(cfg2.resources.ray_num_cpus)  # one cluster for all our runs; fit() then leaves it up
    print(f"  (embedded Ray cluster started in {time.perf_counter() - t0:.1f} s, "
          "shared by our runs, not in their wall)")
    ours = {}
    try:
        trl_block("first")
        for offload, off_args in (("offload as the demo", []), ("offload off", NO_OFFLOAD)):
            for ranks in (2, 1):
                cfg = demo_config(f"trainer.total_steps={steps}", f"resources.n_ranks={ranks}", *ref, *off_args)
                h, w = run_ours(cfg, args.verbose)
                ours[(offload, ranks)] = (our_figures(h, batch), len(trl_runs) - 1)
                print_ours(f"ours, Ray, {ranks} rank{'s' if ranks > 1 else ' '} × {cfg.resources.threads_per_rank} "
                           f"thread, {offload}", ours[(offload, ranks)][0], w, steps)
                trl_block(f"after ours, {ranks} rank{'s' if ranks > 1 else ''}, {offload}")
    finally:
        stop_ray(started)

    if not trl_runs:
        print(f"  our/TRL: not measured — {trl_error}")
        return
    print(f"  TRL mean of {len(trl_runs)} runs: {statistics.mean(f['tokens_per_s'] for f in trl_runs):.0f} tokens/s, "
          f"{statistics.mean(f['completion_tokens_per_s'] for f in trl_runs):.0f} completion tokens/s")
    for (offload, ranks), (f, before) in ours.items():
        around = trl_runs[before:before + 2]
        trl_tps = statistics.mean(t["tokens_per_s"] for t in around)
        trl_ctps = statistics.mean(t["completion_tokens_per_s"] for t in around)
        goal = "   goal ≥ 1.0 (2 ranks)" if ranks == 2 else ""
        print(f"  our/TRL throughput, {ranks} rank{'s' if ranks > 1 else ''} (Ray, {offload}) vs TRL 1 process "
              f"(the TRL runs before and after it): {f['tokens_per_s'] / trl_tps:.2f} (tokens/s), "
              f"{f['completion_tokens_per_s'] / trl_ctps:.2f} (completion tokens/s){goal}   >1 means we are faster")
    print("  not identical: ours starts from a 20-step SFT warm start (preset sft.steps, not in step times) and "
          "TRL from the raw init; 'offload as the demo' writes the optimizer state to a file and back each step "
          "(offload.optimizer, file target on CPU), TRL keeps it in memory.")


def first_reach(rewards: list[float], target: float = 0.9, window: int = 5) -> int | None:
    """Index of the first step whose trailing `window`-step mean reward is ≥ target."""
    for i in range(window - 1, len(rewards)):
        if statistics.mean(rewards[i - window + 1:i + 1]) >= target:
            return i
    return None


def converge(args) -> None:
    budget = args.budget or load_config("demo").trainer.total_steps
    print(f"== steps to 5-step moving average of reward/mean ≥ 0.9, budget {budget} steps ==")
    t0 = time.perf_counter()
    started = start_ray(load_config("demo").resources.ray_num_cpus)
    print(f"  (embedded Ray cluster started in {time.perf_counter() - t0:.1f} s, not in the figures below)")
    try:
        runs = (("GRPO (preset)", []), ("PPO (algorithm.adv_estimator=gae)", ["algorithm.adv_estimator=gae"]))
        for name, extra in runs:
            history, wall = run_ours(demo_config(f"trainer.total_steps={budget}", *extra), args.verbose)
            rewards = [r["reward/mean"] for r in history]
            step_s = sum(r["time/step"] for r in history)
            overhead = f"set-up+SFT+teardown {wall - step_s:.1f} s"
            hit = first_reach(rewards)
            if hit is None:
                # Where it got to, and the entropy: a collapsed policy (entropy near 0) will not get there.
                best = max(range(4, len(rewards)), key=lambda i: statistics.mean(rewards[i - 4:i + 1]), default=None)
                got = "" if best is None else (f"best 5-step mean {statistics.mean(rewards[best - 4:best + 1]):.3f} "
                                               f"at step {best + 1}, ")
                print(f"  {name}: not reached in {len(history)} steps ({got}last 5-step mean "
                      f"{statistics.mean(rewards[-5:]):.3f}, final actor entropy "
                      f"{history[-1].get('actor/entropy', float('nan')):.2f}; {step_s:.1f} s of steps, {overhead})")
            else:
                secs = sum(r["time/step"] for r in history[:hit + 1])
                print(f"  {name}: reached at step {hit + 1} ({secs:.1f} s of training steps; fit() also spent "
                      f"{overhead}); mean step {step_s / len(history):.2f} s")
    finally:
        stop_ray(started)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20, help="steps per throughput run")
    p.add_argument("--budget", type=int, default=0, help="step budget per convergence run (0: preset total_steps)")
    p.add_argument("--parts", default="throughput,converge")
    p.add_argument("--trl-threads", type=int, default=1, help="torch threads for TRL (ours: 1 per rank)")
    p.add_argument("--ref-forward", choices=("neither", "ours"), default="neither",
                   help="neither: skip our reference forward, as TRL does at beta=0 (identical work); "
                        "ours: keep it (the demo's default, for its kl_to_ref metric)")
    p.add_argument("--verbose", action="store_true", help="show the trainers' own per-step lines")
    args = p.parse_args()
    print(f"python {sys.executable}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    parts = args.parts.split(",")
    if "throughput" in parts:
        throughput(args)
    if "converge" in parts:
        converge(args)


if __name__ == "__main__":
    main()
