"""rldbg report TRACE [--json] [--html OUT.html]"""
from __future__ import annotations

import json
import sys

HELP = "summarise a trace: time per role, stragglers, idle time, memory"


def add_arguments(parser) -> None:
    parser.add_argument("trace", help="a .json or .json.gz trace written by rldbg")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--html", metavar="OUT.html",
                        help="also write a self-contained page with the same facts drawn as charts")


def run(args) -> int:
    from rldbg.trace.load import TraceFileError
    from rldbg.trace.report import analyse, render
    try:
        result = analyse(args.trace)
    except TraceFileError as e:
        print(f"rldbg report: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.json else render(result))
    if args.html:
        from rldbg.trace.html_report import write_html
        try:
            n = write_html(args.trace, args.html)
        except OSError as e:
            print(f"rldbg report: cannot write {args.html}: {e.strerror}", file=sys.stderr)
            return 2
        print(f"html report with {n} chart(s): {args.html}", file=sys.stderr if args.json else sys.stdout)
    return 0
