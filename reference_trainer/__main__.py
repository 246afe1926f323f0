"""python -m reference_trainer [--preset demo] [--config FILE.yaml] [key=value ...]"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

# The trainer's own libraries: `pip install rldbg` alone brings the debugger, not these.
NEEDS = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "yaml", "tqdm")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m reference_trainer",
                                description="Reference PPO/GRPO trainer on Ray worker groups.")
    presets = sorted(f.stem for f in (Path(__file__).parent / "presets").glob("*.yaml"))
    p.add_argument("--preset", default="demo", help=f"a preset: {', '.join(presets)} (default: demo)")
    p.add_argument("--config", help="a YAML file applied on top of the preset")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. algorithm.adv_estimator=gae")
    args = p.parse_args(argv)
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        print(f"python -m reference_trainer needs {', '.join(missing)}, not installed here: "
              "pip install 'rldbg[trainer]' (from a checkout: pip install -e '.[trainer]')", file=sys.stderr)
        return 2
    from reference_trainer.config import ConfigError, load_config

    try:
        cfg = load_config(args.preset, args.config, args.overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    from rldbg import NonFinite
    from reference_trainer.single_controller.host import RankDied, RemoteCallError
    from reference_trainer.stop import Stopped
    from reference_trainer.trainer import fit

    try:
        history = fit(cfg)
    except ConfigError as e:   # the cluster cannot hold the run (checked before anything waits)
        print(f"config error: {e}", file=sys.stderr)
        return 2
    except (RankDied, NonFinite) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)   # the one line that matters, no traceback wall
        return 1
    except RemoteCallError as e:
        # The rank's traceback locates the bug; the driver's would only add the path every call takes.
        print(f"{e.role} rank {e.rank}'s traceback:\n{e.remote_traceback.rstrip()}\nerror: {e.headline}",
              file=sys.stderr, flush=True)
        return 1
    except Stopped as e:
        where = "before the first step" if e.step is None else f"at step {e.step}"
        trace = f"; trace at {e.trace}" if e.trace else ""
        print(f"stopped by {e.signame} {where}{trace}", file=sys.stderr, flush=True)
        return e.exit_code
    if history:
        last = history[-5:]
        mean = sum(r["reward/mean"] for r in last) / len(last)
        print(f"done: {len(history)} steps, mean reward over the last {len(last)} steps {mean:.3f}; "
              f"metrics in {cfg.trainer.run_dir}/metrics.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
