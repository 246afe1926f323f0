"""`rldbg flame --role R [--rank N] --seconds N [--out DIR]`: py-spy recording of each matching
worker for N seconds, in parallel; writes <out>/<role>_rank<N>.speedscope.json and .svg.
Workers on this machine are recorded with py-spy directly; others through the dashboard's
/worker/cpu_profile (needs RAY_DASHBOARD_ENABLE_PROFILING=1 on the head)."""
from __future__ import annotations

import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from rldbg.commands import fail, make_folder, unmake
from rldbg.control.discovery import ADDRESS_HELP, cli_dashboard
from rldbg.dashboard import DashboardError
from rldbg.profilers import flamegraph, pyspy, targets


def add_arguments(parser) -> None:
    parser.add_argument("--role", required=True, help="workers holding this role (colocated roles match too)")
    parser.add_argument("--rank", type=int, help="only this rank")
    parser.add_argument("--run", help="only actors of this run (actor names <run>:<roles>:rank<N>)")
    parser.add_argument("--seconds", type=float, required=True, help="how long to record")
    parser.add_argument("--out", default=None, help="output directory (default ./rldbg-flame-<time>)")
    parser.add_argument("--rate", type=int, default=100, help="samples per second (default 100)")
    parser.add_argument("--idle", action="store_true", help="keep idle samples (waiting threads)")
    parser.add_argument("--native", action="store_true", help="include native (C/C++) frames")
    parser.add_argument("--address", help=ADDRESS_HELP)


def _collapsed(t, dash, args) -> str:
    if t.local:
        with tempfile.TemporaryDirectory() as tmp:
            path = pyspy.record(t.pid, args.seconds, os.path.join(tmp, "raw.txt"), args.rate, args.idle, args.native)
            with open(path, encoding="utf-8") as f:
                return f.read()
    return dash.cpu_profile(t.pid, t.ip, t.node_id, args.seconds, args.native)


def run(args) -> int:
    if not args.seconds > 0 or args.seconds > 3600:
        return fail(f"rldbg flame: bad --seconds {args.seconds}: expected 0 < seconds <= 3600", 2)
    if not 1 <= args.rate <= 10000:
        return fail(f"rldbg flame: bad --rate {args.rate}: expected 1-10000 samples per second", 2)
    if args.rank is not None and args.rank < 0:
        return fail(f"rldbg flame: bad --rank {args.rank}: expected a rank >= 0", 2)
    out = args.out or f"rldbg-flame-{time.strftime('%Y%m%d-%H%M%S')}"
    why, made = make_folder(out)   # before the cluster is asked: a typo fails at once
    if why:
        return fail(f"rldbg flame: cannot write to {out}: {why}", 2)
    try:
        return _record(args, out)
    finally:
        unmake(made)   # what recorded nothing is not left behind (a folder with files stays)


def _record(args, out: str) -> int:
    dash = cli_dashboard(args.address, "rldbg flame")
    found, why = targets.find_or_explain(dash, args.role, args.rank, args.run)
    if why:
        return fail(f"rldbg flame: {why}", 1)
    print(f"recording {len(found)} worker(s) for {args.seconds:g} s: {', '.join(t.label for t in found)}",
          file=sys.stderr)

    def one(t):
        start = time.monotonic()
        try:
            text = _collapsed(t, dash, args)
        except (pyspy.PySpyError, DashboardError) as e:
            return t, None, str(e)
        took = time.monotonic() - start
        # py-spy stops when the process exits: a short recording is said, not passed off as the whole
        short = (f" (cut short: {took:.1f} s of {args.seconds:g}, the worker exited or stopped answering)"
                 if took < args.seconds - 0.5 else "")
        if not flamegraph.parse_collapsed(text):
            return t, None, "no samples " + (short.strip() or "(the worker was idle; try --idle)")
        return t, flamegraph.write_both(text, os.path.join(out, t.slug), f"{t.label} (pid {t.pid})"), short

    with ThreadPoolExecutor(max_workers=min(16, len(found))) as pool:
        results = list(pool.map(one, found))
    for t, paths, err in results:
        print(f"{t.label}: {paths[0]}  {paths[1]}{err}" if paths else f"{t.label}: no recording: {err}")
    return 0 if any(paths for _, paths, _ in results) else 1
