"""`rldbg attach [TARGET]`: a terminal debugger for a worker paused at a breakpoint; `rldbg attach
--role R [--rank N] --break FILE:LINE[:COND]`: for a listening worker (debug mode, found in Ray's
internal KV): set the breakpoint, wait for the hit, then debug. debugpy has no authentication:
attach only over loopback or a network you trust.
"""
from __future__ import annotations

import os

from rldbg.commands import fail
from rldbg.control.discovery import ADDRESS_HELP, cli_dashboard
from rldbg.debug.dap import DAPClient, DAPError
from rldbg.debug.lines import resolve as resolve_line
from rldbg.debug.registry import listening_workers
from rldbg.debug.terminal import BREAK_FORM, Session, parse_break
from rldbg.debug.paused_workers import TARGET_FORM, resolve_target


def add_arguments(parser) -> None:
    parser.add_argument("target", nargs="?", help=TARGET_FORM)
    parser.add_argument("--role", help="attach to a listening worker of this role (debug mode)")
    parser.add_argument("--rank", type=int, help="with --role: which rank (default: the only listening one)")
    parser.add_argument("--break", dest="breaks", action="append", default=[], metavar="FILE:LINE[:COND]",
                        help=f"with --role: breakpoint to set, repeatable; {BREAK_FORM}")
    parser.add_argument("--local-root", help="local project root that maps to the worker's cwd (default: cwd)")
    parser.add_argument("--address", help=ADDRESS_HELP)
    parser.add_argument("--ray-address", help="GCS HOST:PORT for --role (default: RAY_ADDRESS, else the local cluster)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="seconds to wait for the stop (default 30 for a paused worker, forever with --break)")


def run(args) -> int:
    if args.timeout is not None and not 0 < args.timeout <= 86400:   # nan too: a 0 s connect broke debugpy's listener
        return fail(f"rldbg attach: bad --timeout {args.timeout}: expected 0 < seconds <= 86400", 2)
    if args.role is None and (args.rank is not None or args.breaks):
        return fail("rldbg attach: --rank and --break need --role ROLE (a listening worker)", 1)
    if args.role is not None:
        return _run_listening(args)
    host, port, worker = resolve_target(args.target, lambda: cli_dashboard(args.address, "rldbg attach"))
    who = f"{worker.label} ({worker.method})" if worker else f"{host}:{port}"
    timeout = 30.0 if args.timeout is None else args.timeout
    client = DAPClient(host, port, timeout=timeout)
    try:
        client.attach()
    except DAPError as e:
        return fail(f"rldbg attach: {who}: {e}", 1)
    print(f"attached to {who} at {host}:{port}; type help")
    return _interact(Session(client, stop_timeout=timeout))


def find_listening(role: str, rank: int | None, ray_address=None, dashboard=None):
    """The one listening worker of `role` (at `rank`); ValueError names what listens."""
    everyone = listening_workers(ray_address, role=role, dashboard=dashboard)
    found = [w for w in everyone if rank is None or w.rank == rank]
    if len(found) == 1:
        return found[0]
    listing = ", ".join(f"{w.role} rank {w.rank} ({w.address})" for w in everyone) or "none"
    if not found:
        want = f"{role} rank {rank}" if rank is not None else role
        raise ValueError(f"no listening worker {want}; listening {role}: {listing} "
                         "(debug mode: RLDBG_LISTEN_ROLES / debug.listen_roles)")
    raise ValueError(f"{len(found)} {role} workers listen; pick one with --rank: {listing}")


def _run_listening(args) -> int:
    try:
        parsed = [parse_break(b) for b in args.breaks]
        for path, line, _ in parsed:
            resolve_line(path, line)   # a line that can never stop fails here, before any lookup
        worker = find_listening(args.role, args.rank, args.ray_address, args.address)
    except ValueError as e:
        return fail(f"rldbg attach: {e}", 1)
    # stop_timeout None: wait for the hit as long as it takes
    session = Session(DAPClient(worker.host, worker.port, timeout=10.0), stop_timeout=args.timeout)
    try:
        session.client.attach()
        for path, line, cond in parsed:   # paths as the worker sees them
            local = os.path.abspath(path) if os.path.exists(path) or not worker.cwd else None
            remote = worker.to_remote(local, args.local_root) if local else os.path.join(worker.cwd, path)
            answer = session.add_breakpoint(remote, line, cond, source=path if local else None)
            state = "set" if answer.get("verified") else f"pending ({answer.get('message') or 'not verified yet'})"
            print(f"breakpoint {remote}:{answer.get('line', line)}" + (f" if {cond}" if cond else "") + f": {state}")
    except DAPError as e:
        return fail(f"rldbg attach: {worker.label} at {worker.address}: {e}", 1)
    what = "the breakpoint" if parsed else "a stop (set one with `b FILE:LINE` from VS Code or pause)"
    print(f"attached to {worker.label} (pid {worker.pid}) at {worker.address}; waiting for {what} "
          "(Ctrl-C detaches; the worker keeps running)")
    return _interact(session)


def _interact(session: Session) -> int:
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
