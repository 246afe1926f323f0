"""Hand a trace file to the Perfetto UI in the user's own browser, without uploading it anywhere.

The UI (https://ui.perfetto.dev) loads `#!/?url=http://127.0.0.1:9001/NAME` by fetching that URL
from the browser; its Content-Security-Policy allows 127.0.0.1:9001 and nothing else on loopback,
so another port only works with a self-hosted UI (`origin`). The server binds 127.0.0.1 only,
answers only the one file name it was given, allows only the UI's origin (CORS, plus Chrome's
Private Network Access preflight), and stops once the file has been sent whole, or at the timeout.
"""
from __future__ import annotations

import errno
import http.server
import os
import shutil
import threading
import time
import urllib.parse
from pathlib import Path

DEFAULT_ORIGIN = "https://ui.perfetto.dev"
DEFAULT_PORT = 9001


class OpenError(RuntimeError):
    """A one-line reason the trace cannot be served."""


class _Handler(http.server.BaseHTTPRequestHandler):
    server: "TraceServer"

    def log_message(self, fmt, *args):   # the command prints its own one-line progress
        pass

    def _head(self, code: int, length: int, headers: dict) -> None:
        self.send_response(code)
        if (origin := self.headers.get("Origin")) == self.server.origin:
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Vary", "Origin")
            self.send_header("Access-Control-Allow-Private-Network", "true")
        for name, value in dict(headers, **{"Cache-Control": "no-cache", "Content-Length": str(length)}).items():
            self.send_header(name, value)
        self.end_headers()

    def _refuse(self, code: int, why: str) -> None:
        body = why.encode()
        self._head(code, len(body), {"Content-Type": "text/plain; charset=utf-8"})
        self.wfile.write(body)

    def _is_ours(self) -> bool:
        return urllib.parse.unquote(urllib.parse.urlsplit(self.path).path) == "/" + self.server.name

    def do_OPTIONS(self):   # CORS / Private Network Access preflight
        if not self._is_ours():
            return self._refuse(404, "not found")
        allow = {"Access-Control-Allow-Methods": "GET, OPTIONS"}
        if req := self.headers.get("Access-Control-Request-Headers"):
            allow["Access-Control-Allow-Headers"] = req
        self._head(204, 0, allow)

    def do_GET(self, body: bool = True):
        if not self._is_ours():
            return self._refuse(404, "not found")
        if self.headers.get("Origin") not in (None, self.server.origin):
            # A page from another origin cannot read the trace (no CORS grant); say so to a human.
            return self._refuse(403, f"only {self.server.origin} may fetch this trace")
        self._head(200, self.server.path.stat().st_size, {"Content-Type": "application/octet-stream"})
        if body:
            with self.server.path.open("rb") as f:
                shutil.copyfileobj(f, self.wfile, 1 << 20)   # raises if the client goes before the end
            self.wfile.flush()
            self.server.fetched_by = self.headers.get("User-Agent", "a client")
            self.server.done.set()

    def do_HEAD(self):
        self.do_GET(body=False)


TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".perfetto-trace")


class TraceServer(http.server.ThreadingHTTPServer):
    """Serves one file to one origin on 127.0.0.1 until it has been fetched once."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, path: str | os.PathLike, port: int = DEFAULT_PORT, origin: str = DEFAULT_ORIGIN):
        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise OpenError(f"{path}: a spill directory: `rldbg export {path} -o trace.json.gz` first" if
                            (self.path / "meta.json").is_file() else f"{path}: no such trace file")
        if not self.path.name.endswith(TRACE_SUFFIXES):   # the UI could not read it (a .rldbg.db store)
            raise OpenError(f"{path}: not a trace the Perfetto UI reads ({', '.join(TRACE_SUFFIXES)})")
        self.name, self.origin = self.path.name, origin.rstrip("/")
        self.done = threading.Event()
        self.fetched_by: str | None = None
        try:
            super().__init__(("127.0.0.1", port), _Handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise OpenError(f"port {port} on 127.0.0.1 is in use (a trace_processor --httpd or another "
                                f"`rldbg open`?); stop it, or pass --port with a self-hosted UI (--origin): "
                                f"ui.perfetto.dev can only fetch from 127.0.0.1:{DEFAULT_PORT}") from None
            raise

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def link(self) -> str:
        return f"{self.origin}/#!/?url=http://127.0.0.1:{self.port}/{urllib.parse.quote(self.name)}&referrer=rldbg"

    def serve_until_fetched(self, timeout_s: float) -> bool:
        """True when the whole file was sent once; False on timeout."""
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        try:
            if ok := self.done.wait(timeout_s):
                time.sleep(0.2)   # let the response's last bytes leave before the socket closes
            return ok
        finally:
            self.shutdown()
            self.server_close()


def browser_available() -> bool:
    """Whether a graphical browser can be opened from here (not over plain SSH, not headless)."""
    import sys
    import webbrowser
    if sys.platform == "darwin" or os.name == "nt":
        return True
    try:   # webbrowser.get() raises where it finds no browser to run
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) and webbrowser.get() is not None
    except webbrowser.Error:
        return False
