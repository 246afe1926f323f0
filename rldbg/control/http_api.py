"""The hub's HTTP API (stdlib ThreadingHTTPServer, one thread in the hub actor).

Security: binds 127.0.0.1 unless told otherwise, and every request must carry
`Authorization: Bearer <token>` (the per-run token, compared in constant time); 401 otherwise.

    GET  /api/state                         hub state (see ControlHub.state)
    GET  /api/events?cursor=N&limit=M       {"cursor": next, "events": [dict, ...]}
    POST /api/gate        {"action": ..., "method"?: str, "step"?: int}   -> gate state
    POST /api/breakpoints {"add": spec} | {"remove": spec}                -> {"specs": [...]}
    POST /api/heartbeat   {"client": "tui-..."}                           -> {"ok": true}
    POST /api/export      {"path"?: str}                                  -> {"path": ...}
Errors: {"error": "one line"} with 400 (bad input), 401 (token), 404 (route), 409 (no trace), 500.
"""
from __future__ import annotations

import hmac
import json
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20
MAX_EVENTS = 50_000


# A client that hangs up before its answer is written (a `rldbg top --once` that gave up, a
# closed browser tab) is normal: nothing to report for it.
_HUNG_UP = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], _HUNG_UP):
            return
        super().handle_error(request, client_address)   # a real bug keeps its traceback


def serve(hub, host: str, port: int, token: str):
    """Start serving `hub` in a daemon thread; returns (server, url)."""
    if not token:
        raise ValueError("the hub needs a non-empty token")
    expected = f"Bearer {token}".encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "rldbg-hub"

        def log_message(self, *args):   # keep the actor's log free of per-request lines
            pass

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body, default=str).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except _HUNG_UP:
                self.close_connection = True

        def _authorized(self) -> bool:
            got = (self.headers.get("Authorization") or "").encode()
            if hmac.compare_digest(got, expected):
                return True
            why = "missing" if not got else "wrong"
            self._send(401, {"error": f"{why} bearer token: send 'Authorization: Bearer <token>' "
                                      "(the token is in ~/.rldbg/hub-<job>-<pid>.json on the driver's machine)"})
            return False

        def _body(self) -> dict:
            n = int(self.headers.get("Content-Length") or 0)
            if n > MAX_BODY:
                raise ValueError(f"request body of {n} bytes is over the {MAX_BODY} byte limit")
            raw = self.rfile.read(n) if n else b""
            if not raw.strip():
                return {}
            try:
                body = json.loads(raw)
            except ValueError:
                raise ValueError(f"request body is not JSON: {raw[:60]!r}") from None
            if not isinstance(body, dict):
                raise ValueError(f"request body must be a JSON object, got {type(body).__name__}")
            return body

        def _run(self, fn) -> None:
            if not self._authorized():
                return
            try:
                self._send(200, fn())
            except LookupError as e:
                self._send(404 if isinstance(e, KeyError) else 409, {"error": str(e).strip("'\"")})
            except ValueError as e:
                self._send(400, {"error": str(e)})
            except Exception as e:   # the API must answer, not drop the connection
                self._send(500, {"error": f"{type(e).__name__}: {e}"[:500]})

        def do_GET(self):
            url = urllib.parse.urlparse(self.path)
            q = urllib.parse.parse_qs(url.query)
            if url.path == "/api/state":
                self._run(hub.state)
            elif url.path == "/api/events":
                self._run(lambda: hub.events(_int(q, "cursor", 0), min(_int(q, "limit", 10_000), MAX_EVENTS)))
            else:
                self._run(lambda: _no_route("GET", url.path))

        def do_POST(self):
            path = urllib.parse.urlparse(self.path).path
            routes = {"/api/gate": lambda b: hub.gate(_str(b, "action"), b.get("method"), _opt_int(b, "step")),
                      "/api/breakpoints": lambda b: {"specs": _breakpoints(hub, b)},
                      "/api/heartbeat": lambda b: hub.heartbeat(b.get("client", "?")),
                      "/api/export": lambda b: hub.export(b.get("path"))}
            route = routes.get(path)
            self._run(lambda: route(self._body()) if route else _no_route("POST", path))

    server = _Server((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="rldbg-hub-http", daemon=True).start()
    h, p = server.server_address[:2]
    return server, f"http://{h}:{p}"


def _no_route(verb: str, path: str):
    raise KeyError(f"no route {verb} {path}; see GET /api/state, /api/events, POST /api/gate, "
                   "/api/breakpoints, /api/heartbeat, /api/export")


def _int(q: dict, key: str, default: int) -> int:
    raw = q.get(key, [str(default)])[0]
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"{key}={value} must be >= 0")
    return value


def _opt_int(body: dict, key: str):
    v = body.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
        raise ValueError(f"{key}={v!r} must be an integer")
    return v


def _str(body: dict, key: str) -> str:
    v = body.get(key)
    if not isinstance(v, str) or not v:
        raise ValueError(f"{key}={v!r}: expected a non-empty string")
    return v


def _breakpoints(hub, body: dict) -> list[str]:
    for key in ("add", "remove"):
        if key in body:
            return hub.breakpoints(**{key: _str(body, key)})
    if not body:
        return hub.breakpoints()
    raise ValueError(f"expected {{\"add\": spec}} or {{\"remove\": spec}}, got keys {sorted(body)}")
