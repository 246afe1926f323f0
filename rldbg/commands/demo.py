"""rldbg demo: run the reference trainer's traced demo. It runs `python -m reference_trainer`
in a child process, so rldbg itself never imports the trainer."""
from __future__ import annotations

import importlib.util
import subprocess
import sys


def add_arguments(p) -> None:
    p.add_argument("--preset", default="demo", help="trainer preset (default: demo)")
    p.add_argument("overrides", nargs="*", help="key=value overrides passed to the trainer")


def run(args) -> int:
    if importlib.util.find_spec("reference_trainer") is None:
        print("rldbg demo: the reference trainer is not installed: pip install 'rldbg[trainer]'", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, "-m", "reference_trainer", "--preset", args.preset, *args.overrides])
