"""A bench's figures as one line of bench/results/<bench>.jsonl, the data bench/README.md's table
of latest runs is read from: a run leaves its own record instead of a note pasted by hand.

    ap.add_argument("--save", action="store_true", help=SAVE_HELP)
    ...
    if args.save:
        save("bench_sentinel", args, {"share_pct": 0.22}, goal="<= 1% of the step")

A line: {date (UTC), bench, args, machine, goal, figures, note}, the same keys as the hand-kept lines.
"""
from __future__ import annotations

import datetime
import json
import os

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
SAVE_HELP = "append this run's figures to bench/results/<bench>.jsonl"


def machine() -> str:
    """Cores and the 1-minute load when the run ends: on a shared machine the load says how much
    to trust the absolute figures."""
    return f"{os.cpu_count()} CPU cores, load {os.getloadavg()[0]:.1f}"


def save(bench: str, args, figures: dict, goal: str, note: str = "") -> str:
    """Append one record and return the file's path. `args` is the run's argparse namespace (or a
    dict), kept so the line says how the figures were taken."""
    opts = args if isinstance(args, dict) else {k: v for k, v in vars(args).items() if k != "save"}
    rec = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "bench": bench, "args": " ".join(f"--{k.replace('_', '-')} {v}" for k, v in opts.items()),
           "machine": machine(), "goal": goal, "figures": figures, "note": note}
    os.makedirs(DIR, exist_ok=True)
    path = os.path.join(DIR, f"{bench}.jsonl")
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    print(f"saved to {path}")
    return path
