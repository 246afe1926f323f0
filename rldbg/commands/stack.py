"""`rldbg stack [--role R] [--rank N] [--run NAME]`: py-spy stacks of the matching workers,
identical stacks grouped ("2 ranks (actor rank 0, 2) in ..."), the odd ones out first."""
from __future__ import annotations

import json
import time

from rldbg.commands import fail
from rldbg.control.discovery import ADDRESS_HELP, cli_dashboard
from rldbg.profilers import stacks, targets

LOOK_AGAIN_S = 0.5   # four looks over 1.5 s: a healthy step moves on, a hang stays put


def add_arguments(parser) -> None:
    parser.add_argument("--role", help="only workers holding this role (colocated roles match too)")
    parser.add_argument("--rank", type=int, help="only this rank")
    parser.add_argument("--run", help="only actors of this run (actor names <run>:<roles>:rank<N>)")
    parser.add_argument("--address", help=ADDRESS_HELP)
    parser.add_argument("--native", action="store_true", help="include native (C/C++) frames")
    parser.add_argument("--via", default="auto", choices=("auto", "dashboard", "local"),
                        help="dashboard /worker/traceback, local py-spy, or dashboard then local (default)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args) -> int:
    if args.rank is not None and args.rank < 0:
        return fail(f"rldbg stack: bad --rank {args.rank}: expected a rank >= 0", 2)
    dash = cli_dashboard(args.address, "rldbg stack")
    found, why = targets.find_or_explain(dash, args.role, args.rank, args.run)
    if why:
        return fail(f"rldbg stack: {why}", 1)
    results = stacks.fetch(found, dash, native=args.native, via=args.via)
    groups, failed = stacks.group(results)

    def again():
        time.sleep(LOOK_AGAIN_S)
        return stacks.fetch(found, dash, native=args.native, via=args.via)
    explained = stacks.explain(results, again)
    if args.json:
        print(json.dumps({**stacks.to_json(groups, failed), "explanation": explained}, indent=2))
    else:
        print("\n".join([*explained, *([""] if explained else []), stacks.format_text(groups, failed)]))
    return 0 if groups else 1
