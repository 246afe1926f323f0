"""`rldbg attach [TARGET]`: a terminal debugger for a paused worker.

TARGET is HOST:PORT, ROLE:RANK (looked up in the dashboard), or nothing (the only
paused worker). debugpy has no authentication: attach only over loopback or a
network you trust.
"""
from __future__ import annotations

import sys

from rldbg.dashboard import Dashboard, DashboardError
from rldbg.debug.dap import DAPClient, DAPError
from rldbg.debug.session import Session
from rldbg.debug.workers import TARGET_FORM, TargetError, resolve_target

HELP = "terminal debugger for a paused or listening worker"


def add_arguments(parser) -> None:
    parser.add_argument("target", nargs="?", help=TARGET_FORM)
    parser.add_argument("--address", help="Ray dashboard URL (default: $RAY_DASHBOARD_ADDRESS or http://127.0.0.1:8265)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the worker to stop (default 30)")


def run(args) -> int:
    try:
        host, port, worker = resolve_target(args.target, lambda: Dashboard(args.address))
    except (TargetError, DashboardError) as e:
        print(f"rldbg attach: {e}", file=sys.stderr)
        return 1
    who = f"{worker.label} ({worker.method})" if worker else f"{host}:{port}"
    client = DAPClient(host, port, timeout=args.timeout)
    try:
        client.attach()
    except DAPError as e:
        print(f"rldbg attach: {who}: {e}", file=sys.stderr)
        return 1
    print(f"attached to {who} at {host}:{port}; type help")
    session = Session(client, stop_timeout=args.timeout)
    try:
        session.start(already_attached=True)
        while session.active:
            try:
                line = input("(rldbg) ")
            except EOFError:
                line = "detach"
            session.execute(line)
    except KeyboardInterrupt:
        print()
    finally:
        if session.active:
            session.end()
            print("detached; the worker resumes")
    return 0
