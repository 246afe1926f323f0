"""`rldbg breakpoints`: workers paused at a breakpoint right now, by role and rank."""
from __future__ import annotations

import json

from rldbg.control.discovery import ADDRESS_HELP, cli_dashboard
from rldbg.debug.paused_workers import list_paused


def add_arguments(parser) -> None:
    parser.add_argument("--address", help=ADDRESS_HELP)
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def run(args) -> int:
    dash = cli_dashboard(args.address, "rldbg breakpoints")
    paused = list_paused(dash)
    if args.json:
        print(json.dumps([p.to_dict() for p in paused], indent=2))
        return 0
    if not paused:   # which cluster was asked: the newest local one may not be the user's
        print(f"no paused workers (in the cluster whose dashboard is {dash.address})")
        return 0
    rows = [("ROLE", "RANK", "METHOD", "NODE", "PID", "DEBUGPY")]
    rows += [(p.role, "-" if p.rank is None else f"{p.rank}/{p.world}", p.method or "-",
              p.node_id[:8], str(p.pid), p.address) for p in paused]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print("\nattach: rldbg attach ROLE:RANK (or HOST:PORT); VS Code: rldbg vscode, or the Ray Distributed Debugger")
    return 0
