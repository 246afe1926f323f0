"""rldbg report TRACE: a run's store, its Perfetto file (the store read from beside it), or a
Chrome JSON trace from elsewhere (imported into a store first).

A truncated or damaged trace is still analysed, but the first line says so and the exit status is 3, so a script never
takes a partial report for a whole one; losses the trace itself records are stated on the next line.
"""
from __future__ import annotations

import json
import os
import sys

from rldbg.commands import fail, make_folder, unmake

DAMAGED_RC = 3
EXIT_AT_ONCE = True   # rldbg.cli: skip freeing the loaded trace object by object at exit
_read: list = []      # what run() read, kept past its return for that (freeing it took 0.3 s)


def add_arguments(parser) -> None:
    parser.add_argument("trace", help="a run's store (.rldbg.db), its .json/.json.gz trace, or a Chrome JSON trace")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--html", metavar="OUT.html",
                        help="also write a self-contained page with the same facts drawn as charts")


def recorded_losses(t) -> str | None:
    """One line from the trace's own loss records (trace/collector.py, the exporter's drop counter), or None."""
    if summary := t.loss_summary():
        # The collector writes a {cause: count} and a list of process names; an edited trace may not.
        by_cause, silent = summary.get("by_cause"), summary.get("silent")
        causes = ", ".join(f"{n} {c}" for c, n in sorted(by_cause.items())) if isinstance(by_cause, dict) else ""
        silent = [str(s) for s in silent] if isinstance(silent, list) else []
        parts = [p for p in (causes,
                             f"{len(silent)} process(es) stopped reporting: {', '.join(silent)}" if silent else "",
                             f"collector restarted {summary['collector_restarts']}x"
                             if summary.get("collector_restarts") else "") if p]
        return f"the trace records {summary.get('total_lost', 0)} events lost ({'; '.join(parts)})"
    return f"the trace records {t.dropped_total} events dropped" if t.dropped_total else None


def run(args) -> int:
    import gc
    gc.disable()   # a short-lived process holding a million acyclic dicts: GC passes would only walk them
    import sqlite3

    from rldbg.store import TraceFileError
    from rldbg.trace.report import analysis, read_trace, render
    # The page's folder, made as export -o makes its own, before any work: a typo fails at once.
    made = []
    if args.html:
        why, made = (f"it is a folder; name the page, e.g. {os.path.join(args.html, 'report.html')}", []) \
            if os.path.isdir(args.html) else make_folder(os.path.dirname(os.path.abspath(args.html)))
        if why:
            return fail(f"rldbg report: cannot write {args.html}: {why}", 2)
    try:
        t = read_trace(args.trace)
    except (sqlite3.DatabaseError, TraceFileError) as e:   # a store damaged after it was written, or no trace
        unmake(made)   # no page will be written: no folder made for it stays
        return fail(f"rldbg report: {args.trace!r}: damaged store ({e})" if isinstance(e, sqlite3.DatabaseError)
                    else f"rldbg report: {e}", 2)
    _read.append(t)
    notes, lost = t.notes, recorded_losses(t)
    if not args.json:
        # First, before any figure or a refusal: what the figures cannot be trusted for, and what was lost.
        if notes:
            print(f"rldbg report: WARNING: {args.trace} is truncated/damaged ({'; '.join(notes)}); "
                  "this report covers only what could be read")
        if lost:
            print(f"rldbg report: WARNING: {lost}")
        sys.stdout.flush()
    try:
        result = analysis(t)
    except TraceFileError as e:
        unmake(made)
        return fail(f"rldbg report: {e}", 2)
    print(json.dumps(dict(result, damage=notes, losses=lost), indent=1) if args.json else render(result))
    if args.html:
        from rldbg.trace.html_report import write_html
        try:
            n = write_html(args.trace, args.html, (result, t))
        except OSError as e:
            return fail(f"rldbg report: cannot write {args.html}: {e.strerror}", 2)
        print(f"html report with {n} chart(s): {args.html}", file=sys.stderr if args.json else sys.stdout)
    return DAMAGED_RC if notes else 0
