"""rldbg open TRACE [--no-browser] [--port P] [--origin URL] [--timeout S]

Serves the trace on 127.0.0.1 just long enough for the Perfetto UI in your browser to fetch it,
and opens (or prints) the deep link. The file goes from this machine to your browser only.
"""
from __future__ import annotations

import os
import socket
import sys

from rldbg.commands import fail


def add_arguments(parser) -> None:
    from rldbg.trace.open_ui import DEFAULT_ORIGIN, DEFAULT_PORT
    parser.add_argument("trace", help="a trace file (.json, .json.gz, .pftrace) or a run directory holding trace.json.gz")
    parser.add_argument("--no-browser", action="store_true", help="print the link instead of opening a browser")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help=f"port on 127.0.0.1 (default {DEFAULT_PORT}, the only one ui.perfetto.dev may fetch from)")
    parser.add_argument("--origin", default=DEFAULT_ORIGIN,
                        help=f"the Perfetto UI's origin (default {DEFAULT_ORIGIN}; set it for a self-hosted UI)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="stop serving after this many seconds if the UI never fetched the file (default 300)")


def _resolve(path: str) -> str:
    inside = [os.path.join(path, name) for name in ("trace.json.gz", "trace.json", "trace.pftrace")]
    return next((p for p in inside if os.path.isfile(p)), path) if os.path.isdir(path) else path


def run(args) -> int:
    from rldbg.trace.open_ui import DEFAULT_ORIGIN, DEFAULT_PORT, OpenError, TraceServer, browser_available
    if not 0 <= args.port <= 65535:
        return fail(f"rldbg open: --port {args.port} is not a port (0-65535)", 2)
    if not 0 < args.timeout < float("inf"):   # nan too
        return fail(f"rldbg open: --timeout {args.timeout} must be > 0 seconds", 2)
    if not args.origin.startswith(("https://", "http://")):
        return fail(f"rldbg open: --origin {args.origin!r} is not an http(s) origin, e.g. https://ui.perfetto.dev", 2)
    try:
        server = TraceServer(_resolve(args.trace), port=args.port, origin=args.origin)
    except OpenError as e:
        return fail(f"rldbg open: {e}", 2)
    link = server.link
    if server.port != DEFAULT_PORT and args.origin == DEFAULT_ORIGIN:
        print(f"rldbg open: WARNING: ui.perfetto.dev fetches only from 127.0.0.1:{DEFAULT_PORT}; on port "
              f"{server.port} the link works with a self-hosted UI (--origin)", file=sys.stderr, flush=True)
    opened = False
    if not args.no_browser and browser_available():
        import webbrowser
        opened = webbrowser.open_new_tab(link)
    if opened:
        print(f"opened {link}", flush=True)
    else:
        print(f"open this link in your browser:\n  {link}", flush=True)
        if not args.no_browser:
            print("no browser here (headless or SSH session): from the machine with the browser, forward the "
                  f"port first:\n  ssh -L {server.port}:127.0.0.1:{server.port} {_user_at_host()}", flush=True)
    print(f"serving {server.path} on 127.0.0.1:{server.port} until the UI has fetched it "
          f"(at most {args.timeout:g} s; Ctrl-C stops)", flush=True)
    if server.serve_until_fetched(args.timeout):
        print(f"trace sent to the UI ({server.path.stat().st_size} bytes); done.", flush=True)
        return 0
    port = server.port   # a browser elsewhere (headless, SSH) reaches it only through a forwarded port
    return fail(f"rldbg open: timed out: no browser fetched {server.name} within {args.timeout:g} s; open the link "
                f"above in a browser that reaches 127.0.0.1:{port} (from another machine: ssh -L "
                f"{port}:127.0.0.1:{port}), or wait longer with --timeout S", 1)


def _user_at_host() -> str:
    try:
        user = os.getlogin()
    except OSError:
        user = os.environ.get("USER", "you")
    return f"{user}@{socket.gethostname()}"
