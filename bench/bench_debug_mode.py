"""Cost of debug mode on the reference trainer, measured in one run:
    python bench/bench_debug_mode.py [--steps 4] [--prompts 4] [--group 4]

Three copies of the demo (2 ranks, small batch) run side by side on one local Ray cluster:
  off       no listener
  on        RLDBG_LISTEN_ROLES=actor: every actor rank listens, no client
  attached  as `on`, plus a DAP client on every actor rank with a breakpoint on a line
            the step never reaches (ActorRolloutRefWorker.load_checkpoint)
Steps are interleaved (off, on, attached, off, ...) so load from other users of the
machine hits all three alike; medians of the step times and both ratios are printed.
Needs the seam call (rldbg.debug.listen.maybe_listen in set_worker_identity).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import ray  # noqa: E402

from rldbg.debug.dap import DAPClient  # noqa: E402
from rldbg.debug.registry import listening_workers  # noqa: E402

import reference_trainer.workers.hybrid as hybrid  # noqa: E402
from reference_trainer.config import load_config  # noqa: E402
from reference_trainer.data import PromptSource  # noqa: E402
from reference_trainer.roles import build_role_groups  # noqa: E402
from reference_trainer.single_controller import shutdown_groups  # noqa: E402
from reference_trainer.tasks import build_tokenizer, get_task  # noqa: E402
from reference_trainer.trainer import train_step, worker_env  # noqa: E402

HYBRID = str(Path(hybrid.__file__).resolve())
NEVER = next(no for no, text in enumerate(Path(HYBRID).read_text().splitlines(), 1)
             if text.strip().startswith("state = torch.load("))  # load_checkpoint: not called by a step


def _config(args, listen: bool):
    over = ["trainer.run_dir=/tmp/rldbg-bench-debug", "trace.enabled=false", "sft.steps=0",
            "trainer.progress=false", f"data.prompts_per_step={args.prompts}", f"data.group_size={args.group}",
            f"actor.mini_batch_size={args.prompts * args.group}",
            f"critic.mini_batch_size={args.prompts * args.group}"]
    return load_config("demo", overrides=over + (["debug.listen_roles=[actor]"] if listen else []))


def _start(args, mode: str, before: set):
    cfg = _config(args, listen=mode != "off")
    groups = build_role_groups(cfg, worker_env(cfg))
    for name in ("actor", "reward", "critic"):
        if groups.get(name):
            groups[name].init_model()
    clients = []
    if mode != "off":
        mine = [w for w in listening_workers(role="actor") if w.key not in before]
        if len(mine) != cfg.resources.n_ranks:
            shutdown_groups(groups.values())
            raise SystemExit(f"bench: {len(mine)} listening actor ranks in mode {mode!r}, expected "
                             f"{cfg.resources.n_ranks}; is maybe_listen called from set_worker_identity?")
        before.update(w.key for w in mine)
        if mode == "attached":
            for w in mine:
                c = DAPClient(w.host, w.port, timeout=60)
                c.attach(breakpoints={HYBRID: [NEVER]})
                clients.append(c)
    return cfg, groups, clients


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=4, help="timed steps per mode (after one warm-up)")
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    args = p.parse_args()
    ray.init(address="local", num_cpus=4, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False)
    modes = ("off", "on", "attached")
    runs, seen = {}, set()
    try:
        for mode in modes:
            runs[mode] = _start(args, mode, seen)
        cfg = runs["off"][0]
        src = PromptSource(get_task(cfg.data.task), build_tokenizer(), cfg.data.prompts_per_step,
                           cfg.data.group_size, 0)
        times = {m: [] for m in modes}
        for step in range(args.steps + 1):
            batch = src.batch(step)
            for mode in modes:
                mcfg, groups, _ = runs[mode]
                t0 = time.perf_counter()
                train_step(step, batch, groups["actor"], groups.get("critic"), groups["reward"], mcfg)
                if step:  # step 0 warms up
                    times[mode].append(time.perf_counter() - t0)
        med = {m: statistics.median(v) for m, v in times.items()}
        for m in modes:
            print(f"{m:9s} median step {med[m] * 1000:8.1f} ms   ({', '.join(f'{t * 1000:.0f}' for t in times[m])})")
        print(f"ratio on/off       {med['on'] / med['off']:.3f}")
        print(f"ratio attached/off {med['attached'] / med['off']:.3f}")
    finally:
        for _cfg, groups, clients in runs.values():
            for c in clients:
                c.disconnect()
            shutdown_groups(groups.values())
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
