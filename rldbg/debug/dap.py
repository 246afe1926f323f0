"""A Debug Adapter Protocol client over TCP, for debugpy listeners in Ray workers (`rldbg attach`).

The attach order matters with debugpy: initialize -> attach -> wait for the `initialized` EVENT ->
breakpoints -> configurationDone -> only then does the attach RESPONSE arrive. Waiting for that
response before configurationDone deadlocks, so attach() collects it last.
"""
from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time


class DAPError(RuntimeError):
    """A failed request, a lost connection or a timeout, in one line."""


class DAPClient:
    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.host, self.port, self.timeout = host, int(port), timeout
        self._sock: socket.socket | None = None
        self._seq = 0
        self._send_lock = threading.Lock()
        self._pending: dict[int, queue.Queue] = {}
        self._pending_lock = threading.Lock()
        self.events: queue.Queue = queue.Queue()
        self._closed = threading.Event()
        self._reader: threading.Thread | None = None
        self.stopped_thread: int | None = None

    def connect(self) -> "DAPClient":
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as e:
            raise DAPError(f"cannot connect to debugpy at {self.host}:{self.port} ({e})") from None
        self._sock.settimeout(None)  # the reader blocks; requests time out on their queues
        self._reader = threading.Thread(target=self._read_loop, name="rldbg-dap-reader", daemon=True)
        self._reader.start()
        return self

    def attach(self, exception_filters=("uncaught",), breakpoints: dict | None = None) -> dict:
        """Connect (if needed) and run the attach handshake. `breakpoints` maps a source path to a list of lines (or
        {line, condition} dicts). Returns the initialize capabilities."""
        if self._sock is None:
            self.connect()
        caps = self.request("initialize", {"clientID": "rldbg", "adapterID": "debugpy", "pathFormat": "path",
                                           "linesStartAt1": True, "columnsStartAt1": True,
                                           "supportsRunInTerminalRequest": False})
        # justMyCode must be off: with it on, a stop inside library-looking code (site-packages, Ray workers) is never
        # reported. Stepping skips Ray's own modules (actor methods called via self go through Ray's tracing wrapper).
        attach_seq = self.send_request("attach", {"justMyCode": False, "subProcess": False,
                                                  "rules": [{"module": "ray", "include": False}]})
        self.wait_event("initialized", self.timeout, context="after attach")
        for path, lines in (breakpoints or {}).items():
            self.set_breakpoints(path, lines)
        self.request("setExceptionBreakpoints", {"filters": list(exception_filters)})
        self.request("configurationDone")
        self.response(attach_seq, "attach")
        return caps or {}

    def disconnect(self, terminate: bool = False) -> None:
        """Detach; a worker that was stopped resumes (debugpy does that itself)."""
        if self._sock is None or self._closed.is_set():
            self.close()
            return
        with contextlib.suppress(DAPError):
            self.request("disconnect", {"terminateDebuggee": terminate, "restart": False}, timeout=5)
        self.close()

    def close(self) -> None:
        self._closed.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.disconnect()

    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode("utf-8")
        data = b"Content-Length: %d\r\n\r\n" % len(body) + body
        with self._send_lock:
            if self._sock is None or self._closed.is_set():
                raise DAPError(f"not connected to {self.host}:{self.port}")
            try:
                self._sock.sendall(data)
            except OSError as e:
                raise DAPError(f"connection to {self.host}:{self.port} lost ({e})") from None

    def _read_loop(self) -> None:
        stream = self._sock.makefile("rb")
        try:
            while not self._closed.is_set():
                # Headers end at a blank line; only Content-Length is meaningful.
                length = None
                while (line := stream.readline()).strip():
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if not line:
                    return
                if length is None:
                    raise DAPError(f"DAP frame without Content-Length: {line[:100]!r}")
                body = stream.read(length)
                if len(body) < length:
                    return
                self._dispatch(json.loads(body))
        except (OSError, ValueError, DAPError):
            return
        finally:
            stream.close()
            self._closed.set()
            self.events.put({"type": "event", "event": "_closed", "body": {}})
            with self._pending_lock:
                for q in self._pending.values():
                    q.put(None)

    def _dispatch(self, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "response":
            with self._pending_lock:
                q = self._pending.get(msg.get("request_seq"))
            if q is not None:
                q.put(msg)
        elif kind == "event":
            if msg.get("event") == "stopped":
                self.stopped_thread = msg.get("body", {}).get("threadId")
            self.events.put(msg)
        # Reverse requests (runInTerminal, ...) are not used with attach.

    def send_request(self, command: str, arguments: dict | None = None) -> int:
        with self._send_lock:
            self._seq += 1
            seq = self._seq
        with self._pending_lock:
            self._pending[seq] = queue.Queue()
        self._send({"seq": seq, "type": "request", "command": command,
                    **({"arguments": arguments} if arguments is not None else {})})
        return seq

    def response(self, seq: int, command: str, timeout: float | None = None) -> dict:
        timeout = self.timeout if timeout is None else timeout
        with self._pending_lock:
            q = self._pending[seq]
        try:
            msg = q.get(timeout=timeout)
        except queue.Empty:
            raise DAPError(f"no answer to {command!r} from {self.host}:{self.port} within {timeout:g}s") from None
        finally:
            with self._pending_lock:
                self._pending.pop(seq, None)
        if msg is None:
            raise DAPError(f"connection to {self.host}:{self.port} closed while waiting for {command!r}")
        if not msg.get("success"):
            err = msg.get("message") or msg.get("body", {}).get("error", {}).get("format") or "failed"
            raise DAPError(f"{command} failed: {err}")
        return msg.get("body") or {}

    def request(self, command: str, arguments: dict | None = None, timeout: float | None = None) -> dict:
        return self.response(self.send_request(command, arguments), command, timeout)

    def wait_event(self, name: str, timeout: float | None = None, context: str = "") -> dict:
        """Next event called `name`; other events seen meanwhile are dropped
        (except 'stopped', which is kept for wait_stopped)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        held = []
        try:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    ev = self.events.get(timeout=left)
                except queue.Empty:
                    break
                if ev.get("event") == name:
                    return ev.get("body") or {}
                if ev.get("event") == "_closed":
                    raise DAPError(f"connection to {self.host}:{self.port} closed while waiting for {name!r}")
                if ev.get("event") == "stopped":
                    held.append(ev)
        finally:
            for ev in held:
                self.events.put(ev)
        where = f" {context}" if context else ""
        raise DAPError(f"no {name!r} event from {self.host}:{self.port}{where} within {timeout:g}s")

    def wait_stopped(self, timeout: float | None = None) -> dict:
        """Body of the next `stopped` event: {reason, threadId, ...}."""
        body = self.wait_event("stopped", timeout)
        self.stopped_thread = body.get("threadId", self.stopped_thread)
        return body

    def set_breakpoints(self, path: str, lines) -> list[dict]:
        """Replace one file's breakpoints; `lines`: ints or {line, condition} dicts ([]: none)."""
        bps = [{"line": int(n["line"]), **({"condition": n["condition"]} if n.get("condition") else {})}
               if isinstance(n, dict) else {"line": int(n)} for n in lines]
        body = self.request("setBreakpoints", {"source": {"path": str(path)}, "breakpoints": bps})
        return body.get("breakpoints", [])

    def stack_trace(self, thread_id: int | None = None, levels: int = 100) -> list[dict]:
        tid = self._thread(thread_id)
        return self.request("stackTrace", {"threadId": tid, "startFrame": 0, "levels": levels}).get("stackFrames", [])

    def scopes(self, frame_id: int) -> list[dict]:
        return self.request("scopes", {"frameId": frame_id}).get("scopes", [])

    def variables(self, reference: int) -> list[dict]:
        return self.request("variables", {"variablesReference": reference}).get("variables", [])

    def evaluate(self, expression: str, frame_id: int | None = None, context: str = "repl") -> dict:
        frame = {"frameId": frame_id} if frame_id is not None else {}
        return self.request("evaluate", {"expression": expression, "context": context, **frame})

    def _thread(self, thread_id: int | None) -> int:
        tid = thread_id if thread_id is not None else self.stopped_thread
        if tid is None:
            raise DAPError("no stopped thread; wait_stopped() first or pass thread_id")
        return tid

    def resume(self, how: str = "continue", thread_id: int | None = None) -> dict:
        """how: continue | next (step over) | stepIn | stepOut, for the stopped thread (or thread_id)."""
        return self.request(how, {"threadId": self._thread(thread_id)})

    @property
    def closed(self) -> bool:
        return self._closed.is_set()
