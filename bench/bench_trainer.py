"""reference_trainer speed and learning, and TRL's GRPOTrainer on the same problem, in one run.

Run on demand (not a test; TRL lives only in /tmp/trlvenv, which also sees the repo):
    /tmp/trlvenv/bin/python bench/bench_trainer.py [--block 2] [--rounds 30] [--budget 150] [--parts throughput,converge]

throughput: the demo preset on 2 ranks and on 1 rank, with offload as the preset has it and with
    offload off, each beside a TRL GRPOTrainer run of the same model/tokenizer/prompts/reward/batch.
    The two alternate in blocks of --block steps, --rounds blocks a side (TRL's step clock hands
    over to ours between its steps, off its clock), so this shared machine's changes of speed hit
    both sides alike. Identical passes: no reference forward on either side unless --ref-forward
    ours. Prints tokens/s, s/step and our per-phase step times, and our/TRL throughput over all
    blocks and block by block, each with a 90% bootstrap interval over the blocks (>1: we are
    faster; goal ≥ 1.0 at 2 ranks, "met" only when the interval is above it).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for the helpers next to this file
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from bootstrap import interval, verdict  # noqa: E402
from demo_steps import DemoSteps  # noqa: E402
from reference_trainer.config import load_config  # noqa: E402
from reference_trainer.runtime import start_ray, stop_ray  # noqa: E402
from reference_trainer.trainer import fit  # noqa: E402

NO_OFFLOAD = ["offload.optimizer=false", "offload.grads=false"]
SKIP = 2  # first steps left out of means: allocator, thread pools and caches warm up there
PHASES = ("rollout", "reward", "log_prob", "advantage", "update_critic", "update_actor", "step")


_SCRATCH = tempfile.TemporaryDirectory(prefix="rldbg-bench-trainer-")   # every run dir, removed at exit


def demo_config(*overrides: str):
    run_dir = tempfile.mkdtemp(dir=_SCRATCH.name)
    base = ["trace.enabled=false", "trainer.progress=false", f"trainer.run_dir={run_dir}"]
    return load_config("demo", overrides=base + list(overrides))


def run_ours(cfg, verbose: bool) -> tuple[list[dict], float]:
    """fit() with its per-step console lines swallowed unless --verbose; returns (records, wall s)."""
    sink = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    t0 = time.perf_counter()
    with sink:
        history = fit(cfg)
    return history, time.perf_counter() - t0


class Pairs:
    """Blocks of `block` steps, ours and TRL's alternating: TRL's step clock calls between() after
    each of its steps (off its clock), and after every `block` of them (past the warm-up) the
    same number of ours run there, while TRL waits. Each block of ours sits beside the TRL block
    just before it, so a change in this machine's speed hits both."""

    def __init__(self, run: DemoSteps, block: int):
        self.run, self.block = run, block
        self.ours: list = []      # per block: (tokens, completion tokens, seconds)
        self.theirs: list = []    # per block: (tokens, seconds)
        self.records: list = []

    def our_block(self) -> tuple:
        toks = comp = secs = 0.0
        batch = self.run.cfg.data.prompts_per_step * self.run.cfg.data.group_size
        for _ in range(self.block):
            t0 = time.perf_counter()
            r = self.run.step()
            secs += time.perf_counter() - t0
            toks += r["tokens"]
            comp += r["response_length"] * batch   # the mean response_mask row sum × rows
            self.records.append(r)
        return toks, comp, secs

    def between(self, clock) -> None:
        n = len(clock.seconds)
        if n <= SKIP or (n - SKIP) % self.block:
            return
        self.theirs.append((sum(clock.tokens[n - self.block:n]), sum(clock.seconds[n - self.block:n])))
        self.ours.append(self.our_block())


def block_ratios(pairs: list) -> list:
    """Our tokens/s over TRL's, block by block; pairs = [(ours, theirs)]."""
    return [(o[0] / o[2]) / (t[0] / t[1]) for o, t in pairs]


def pooled_ratio(pairs: list) -> float:
    """All of our tokens over all of our seconds, against the same for TRL."""
    return (sum(o[0] for o, _ in pairs) / sum(o[2] for o, _ in pairs)) / \
        (sum(t[0] for _, t in pairs) / sum(t[1] for _, t in pairs))


def throughput(args) -> None:
    block, rounds = args.block, args.rounds
    n_trl = SKIP + block * rounds
    cfg0 = demo_config()
    batch = cfg0.data.prompts_per_step * cfg0.data.group_size
    print(f"== throughput: demo preset (GRPO, digit_shift, llama-tiny); ours and TRL alternating in blocks of "
          f"{block} steps, {rounds} blocks a side, after {SKIP} warm-up steps each ==")
    print(f"  batch: {cfg0.data.prompts_per_step} prompts × {cfg0.data.group_size} = {batch} completions/step, "
          f"max_new_tokens {cfg0.rollout.max_new_tokens}, temperature {cfg0.rollout.temperature}, lr {cfg0.actor.lr}")
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
    t0 = time.perf_counter()
    started = start_ray(cfg0.resources.ray_num_cpus)  # one cluster for all our runs
    print(f"  (embedded Ray cluster started in {time.perf_counter() - t0:.1f} s, not in any figure)")
    try:
        for offload, off_args in (("offload as the demo", []), ("offload off", NO_OFFLOAD)):
            for ranks in (2, 1):
                cfg = demo_config(f"resources.n_ranks={ranks}", *ref, *off_args)
                label = (f"{ranks} rank{'s' if ranks > 1 else ''} × {cfg.resources.threads_per_rank} thread, "
                         f"{offload}")
                with DemoSteps(cfg) as run:
                    for _ in range(SKIP):
                        run.step()   # warm-up, as TRL's first SKIP steps are
                    pairs = Pairs(run, block)
                    if run_trl_grpo is None:
                        for _ in range(rounds):
                            pairs.ours.append(pairs.our_block())
                    else:
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")  # TRL/transformers deprecation chatter
                            clock = run_trl_grpo(cfg, n_trl, threads=args.trl_threads, between=pairs.between)
                report_pairs(label, ranks, pairs, None if run_trl_grpo is None else clock)
    finally:
        stop_ray(started)
    if run_trl_grpo is None:
        print(f"  our/TRL: not measured — {trl_error}")
        return
    print(f"  TRL {trl.__version__} GRPOTrainer: one process, no Ray, torch threads={args.trl_threads}. Not identical: "
          "ours starts from a 20-step SFT warm start (preset sft.steps, not in step times) and TRL from the raw init; "
          "'offload as the demo' moves the optimizer state out of the process into a file and back each step "
          "(offload.optimizer, file target on CPU: its pages unmapped and mapped again), TRL keeps it in memory.")


def report_pairs(label: str, ranks: int, pairs: Pairs, clock) -> None:
    ours = pairs.ours
    secs = sum(o[2] for o in ours)
    steps = len(ours) * pairs.block
    print(f"  ours, Ray, {label}: {sum(o[0] for o in ours) / secs:7.0f} tokens/s  "
          f"{sum(o[1] for o in ours) / secs:6.0f} completion tokens/s  {secs / steps:.3f} s/step ({steps} steps)")
    print("      per phase, s/step: " + "  ".join(
        f"{p} {statistics.mean(r[f'time/{p}'] for r in pairs.records):.3f}" for p in PHASES
        if all(f"time/{p}" in r for r in pairs.records)))
    if clock is None:
        return
    theirs = pairs.theirs
    t_secs = sum(t[1] for t in theirs)
    keep = range(SKIP, SKIP + len(theirs) * pairs.block)
    comp = sum(clock.completion_tokens[i] for i in keep if i < len(clock.completion_tokens))
    print(f"  TRL beside it:  {sum(t[0] for t in theirs) / t_secs:7.0f} tokens/s  {comp / t_secs:6.0f} completion "
          f"tokens/s  {t_secs / steps:.3f} s/step (the same number of steps)")
    both = list(zip(ours, theirs))
    ratios = block_ratios(both)
    lo, hi = interval(both, pooled_ratio)
    goal = ranks == 2
    print(f"  our/TRL tokens/s, {label}: {pooled_ratio(both):.2f} over all blocks (90% interval {lo:.2f}..{hi:.2f})"
          + (f", goal ≥ 1.0: {verdict(lo, hi, 1.0, at_least=True)}" if goal else ""))
    mlo, mhi = interval(ratios, statistics.median)
    print(f"      block by block: median {statistics.median(ratios):.2f} (90% interval {mlo:.2f}..{mhi:.2f}), "
          f"range {min(ratios):.2f}..{max(ratios):.2f}   >1 means we are faster")


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
    p.add_argument("--block", type=int, default=2, help="steps per block (throughput: ours and TRL alternate)")
    p.add_argument("--rounds", type=int, default=30, help="blocks a side per configuration (throughput)")
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
