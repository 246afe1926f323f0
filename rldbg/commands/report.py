"""rldbg report TRACE [--json]"""
from __future__ import annotations

import json
import sys

HELP = "summarise a trace: time per role, stragglers, idle time, memory"


def add_arguments(parser) -> None:
    parser.add_argument("trace", help="a .json or .json.gz trace written by rldbg")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args) -> int:
    from rldbg.trace.load import TraceFileError
    from rldbg.trace.report import analyse, render
    try:
        result = analyse(args.trace)
    except TraceFileError as e:
        print(f"rldbg report: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.json else render(result))
    return 0
