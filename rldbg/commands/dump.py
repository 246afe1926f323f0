"""rldbg dump [--address auto] [--collector NAME] [--wait S]

Asks a running job's flight recorder (trace.window / RLDBG_TRACE_WINDOW) to write every process's
last window now, and waits for the file: RUN/flight-<step>-manual.json.gz. The run goes on. It
talks to the job's trace collector (found in the Ray cluster's KV store, with the token there),
so it needs what `rldbg export --address` needs: to reach the cluster."""
from __future__ import annotations

import os
import sys
import time

from rldbg.commands import fail


def add_arguments(parser) -> None:
    parser.add_argument("--address", default="auto", help="Ray cluster address of the running job (default: auto)")
    parser.add_argument("--collector", help="the traced job's collector, rldbg-collector-<job id> "
                                            "(default: the only traced job on the cluster)")
    parser.add_argument("--wait", type=float, default=30.0, metavar="S",
                        help="seconds to wait for the file to be written (default 30; 0: do not wait)")


def traced_job(address: str, name: str | None, prog: str) -> tuple[str, dict]:
    """(collector name, its entry) of the traced job `name` (default: the only one) on the Ray
    cluster at `address`; SystemExit with one line when there is no cluster, none or several."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import socket

    import ray
    from rldbg.trace import address as where
    gcs = None
    try:   # ray.init retries a dead GCS for a minute, printing Ray's own warnings: knock first
        host, port = (gcs := ray._private.services.canonicalize_bootstrap_address(address)).rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=3).close()
    except OSError as e:   # refused, unreachable, or (ConnectionError, no gcs yet) no cluster found for "auto"
        if gcs is None and isinstance(e, ConnectionError):   # "auto" is the default: the user may never have typed it
            from rldbg.debug.registry import ADDRESS_HINT
            raise SystemExit(f"{prog}: no running Ray cluster found on this machine; "
                             + ADDRESS_HINT.replace("--ray-address", "--address")) from None
        raise SystemExit(f"{prog}: no Ray cluster at --address {address!r} ({gcs + ': ' if gcs else ''}{e})") from None
    except Exception:   # noqa: BLE001 - nothing to knock at (a Ray without it, an odd address): ray.init says
        pass
    try:
        ray.init(address=address, namespace=where.NAMESPACE, logging_level="ERROR")
    except (ConnectionError, RuntimeError, ValueError) as e:   # ValueError: an address of no known form
        raise SystemExit(f"{prog}: no Ray cluster at --address {address!r} ({str(e).splitlines()[0]})") from None
    try:
        found = where.find_all()
    finally:
        ray.shutdown()
    if name is None:
        if not found:
            raise SystemExit(f"{prog}: no traced job on the Ray cluster at --address {address!r} (a run traces with "
                             "trace.enabled=true, RLDBG_TRACE or rldbg.trace.start())")
        if len(found) > 1:
            raise SystemExit(f"{prog}: found {len(found)} traced jobs {sorted(found)}; pick one with --collector")
        name = next(iter(found))
    elif name not in found:
        raise SystemExit(f"{prog}: no traced job {name!r} on the Ray cluster at {address}; "
                         f"traced: {sorted(found) or 'none'}")
    return name, found[name]


def run(args) -> int:
    if not args.wait >= 0:   # nan too
        return fail(f"rldbg dump: --wait {args.wait:g}: seconds to wait, >= 0", 2)
    from rldbg.trace.address import connect
    from rldbg.trace.wire import WireError
    name, entry = traced_job(args.address, args.collector, "rldbg dump")
    try:
        conn = connect(entry)
    except (OSError, WireError) as e:
        return fail(f"rldbg dump: cannot reach {name}'s collector at {entry.get('address')}: {e}", 1)
    try:
        try:
            st = conn.call("dump", "manual", {"by": "rldbg dump", "pid": os.getpid()})
        except WireError as e:   # the collector's own one-line refusal (a trace without a window)
            return fail(f"rldbg dump: {e}", 2)
        if st.get("rate_limited"):
            print(f"rldbg dump: no new dump: a {st['reason']} dump was taken moments ago ({st['path']}, "
                  f"{st['state']}); dumps are at most one per 30 s", file=sys.stderr)
        deadline = time.monotonic() + args.wait
        while args.wait and st["state"] not in ("written", "failed") and time.monotonic() < deadline:
            time.sleep(0.2)
            st = conn.call("dump_status", st["id"]) or st
    finally:
        conn.close()
    if st["state"] == "written":
        at = "before the first step" if st["step"] is None else f"step {st['step']}"
        print(f"{'the latest dump is' if st.get('rate_limited') else 'wrote'} {st['path']} ({at}, {st['events']} "
              f"events from {st['processes']} processes, {st['seconds']:.1f} s)")
        return 0
    if st["state"] == "failed":
        return fail(f"rldbg dump: writing {st['path']} failed: {st['error']}", 1)
    return fail(f"rldbg dump: asked; {st['path']} is still being written ({st['state']})"
                + (f" after {args.wait:g} s" if args.wait else ""), 0 if not args.wait else 1)
