"""`rldbg top`: the live TUI. It finds the run's hub through the run's Ray dashboard (discovery.resolve_dashboard),
before or after the run starts; with several runs in view it asks which one (or needs --job RUN off a terminal): it
never picks one silently. --once prints the roles table and the gate once (scripts, CI logs), waiting up to --wait
seconds for slow answers and saying what it waited for.
"""
from __future__ import annotations

import sys

from rldbg.commands import fail


def add_arguments(parser) -> None:
    from rldbg.control.discovery import ADDRESS_HELP
    parser.add_argument("--address", help=ADDRESS_HELP)
    parser.add_argument("--job", help="the run: RUN (JOB-PID, as the driver prints it) or a Ray job id "
                                      "(default: the only run in view; with several, a choice)")
    parser.add_argument("--token", help="the hub's token (default: $RLDBG_TOKEN or ~/.rldbg/hub-<job>-<pid>.json)")
    parser.add_argument("--once", action="store_true", help="print one snapshot (roles + gate) and exit")
    parser.add_argument("--refresh", type=float, default=1.0, help="seconds between polls (default 1)")
    parser.add_argument("--wait", type=float, default=60.0, metavar="S",
                        help="with --once: seconds to wait for a slow dashboard or hub (default 60)")

# --once names what it waited for when an answer took at least this long (a loaded machine).
SLOW_ANSWER_S = 1.0


def run(args) -> int:
    from rldbg.dashboard import DashboardError
    from rldbg.tui.data import LiveSource

    if not 0.05 <= args.refresh <= 60:
        return fail(f"rldbg top: --refresh {args.refresh} must be between 0.05 and 60 seconds", 2)
    if not 1 <= args.wait <= 3600:
        return fail(f"rldbg top: --wait {args.wait} must be between 1 and 3600 seconds", 2)
    from rldbg.control.discovery import RunChoiceError, resolve_dashboard
    try:
        address, origin = resolve_dashboard(args.address, args.job)
        # The live TUI asks again every --refresh; a single --once snapshot waits for its answers.
        source = LiveSource(address, args.job, args.token, timeout=args.wait if args.once else 5.0)
        source.dash.get("/api/v0/actors", [("limit", "1")])   # fail fast, in one line, on a wrong address
        print(f"rldbg top: cluster at {source.address} (from {origin})", file=sys.stderr, flush=True)
        if args.job is None:
            source.job = pick_run(source, interactive=not args.once and sys.stdin.isatty())
    except (DashboardError, RunChoiceError) as e:
        return fail(f"rldbg top: {e}", 2)
    if args.once:
        return once(source)
    from rldbg.tui.app import TopApp

    TopApp(source, refresh=args.refresh, freeze_gc=True).run()
    return 0


def pick_run(source, interactive: bool) -> str | None:
    """None when zero or one run is in view (the poll waits for / takes it); the chosen run's id
    when several are; RunChoiceError when several are and nobody can be asked."""
    from rldbg.control.discovery import RunChoiceError, describe, discover
    hubs = discover(source.address, timeout=getattr(source, "timeout", 10.0))
    if len(hubs) <= 1:
        return None
    if not interactive:
        raise RunChoiceError(f"{len(hubs)} runs in the dashboard at {source.address}: {describe(hubs)}; "
                             "pick one with --job RUN")
    for i, h in enumerate(hubs, 1):
        print(f"  {i}. run {h['run']}  hub {h['url']}" + ("" if h.get("token") else "  (no token here)"))
    while True:
        answer = input(f"watch which run [1-{len(hubs)}]? ").strip()
        if answer.isdigit() and 1 <= int(answer) <= len(hubs):
            return hubs[int(answer) - 1]["run"]
        print(f"answer a number from 1 to {len(hubs)}")


def once(source) -> int:
    from rldbg.tui.model import Model, sort_filter
    from rldbg.tui.widgets.roles import COLUMNS
    from rldbg.tui.widgets.stepper import gate_line

    source.catch_up = True   # the newest state of every worker, not the first page of the backlog
    view = Model(source.address).update(source.poll())
    if slow := [(what, s) for what, s in getattr(source, "waited", {}).items() if s >= SLOW_ANSWER_S]:
        print("rldbg top: waited " + ", ".join(f"{s:.1f} s for {what}" for what, s in slow)
              + f" (a busy machine answers slowly; --wait {source.timeout:g} bounds each answer)",
              file=sys.stderr, flush=True)
    print(f"rldbg top: {view.message or view.status}" if view.status != "connected" else
          f"rldbg top: run {source.job or view.job_id}  job {view.job_id}  hub {view.hub_url}  step {view.state.get('step')}  "
          f"calls done {view.state.get('calls_done')}")
    rows = [r.cells() for r in sort_filter(view.rows, "role", "")]
    widths = [max([len(c)] + [len(str(r[i])) for r in rows]) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    if not rows:
        print("(no role x rank actors in the dashboard)")
    if view.status == "connected":
        print(gate_line(view.gate).plain)
        if pending := view.gate.get("pending"):
            print(f"pending: {pending.get('phase')} {pending.get('group')}.{pending.get('method')} step {pending.get('step')}")
    return 0 if view.status != "disconnected" else 1
