"""The collector's listener in the driver: every other process of the job ships to it over TCP.

Not a Ray actor: an actor is a process Ray wakes 100 times a second whatever it does, and each
batch would be a Ray task (~1 ms of CPU per 200 ms demo step on a small VM, measured); here the
collector costs a thread blocked in accept() and one blocked in recv() per connected process.
A connection must first present the session's token (published with the address, address.py);
then it may ship batches and ask read-only queries, msgpack only: nothing is unpickled or run.
Its threads run at nice 19 (background.py) and are hidden from debugpy, so pausing the driver in
a debugger does not pause the collection of every other process's events.
"""
from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import socket
import threading

from rldbg import switches
from rldbg.trace import wire
from rldbg.trace.background import lower_this_thread

HELLO_TIMEOUT_S = 10.0          # a peer that connects and says nothing is dropped after this
QUERIES = ("ingest", "clock", "config", "stats", "events_since", "dump", "dump_status")   # what a peer may ask


class CollectorServer:
    """Listens on RLDBG_TRACE_HOST, else the driver node's Ray IP, else loopback."""

    def __init__(self, collector, ray_node_ip: str | None):
        self.collector, self.token = collector, secrets.token_hex(32)
        host = os.environ.get(switches.TRACE_HOST) or ray_node_ip or "127.0.0.1"
        try:
            self.sock = socket.create_server((host, 0), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        except (OSError, ValueError) as e:
            raise RuntimeError(f"rldbg.trace: the trace collector cannot listen on {host!r} ({e}); set "
                               f"{switches.TRACE_HOST} to an address of this machine that every node of the "
                               "cluster reaches") from None
        port = self.sock.getsockname()[1]
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._conns: set = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = self._start(self._accept, "rldbg-collector-accept")

    def _start(self, target, name: str, *args) -> threading.Thread:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        t.pydev_do_not_trace = t.is_pydev_daemon_thread = True   # debugpy neither traces nor suspends it
        t.start()
        return t

    def _accept(self) -> None:
        lower_this_thread()
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return   # closed
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                self._conns.add(conn)
            self._start(self._serve, "rldbg-collector-conn", conn)

    def _serve(self, conn: socket.socket) -> None:
        lower_this_thread()
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(HELLO_TIMEOUT_S)
            if (got := wire.receive(conn, first=True)) is None:
                return
            head = got[0]
            if not (isinstance(head, list) and len(head) == 2 and head[0] == "hello" and isinstance(head[1], str)
                    and hmac.compare_digest(head[1], self.token)):
                wire.send(conn, [False, "a wrong token: this is not the trace of your job's session"])
                return
            wire.send(conn, [True, self.collector.config()])
            conn.settimeout(None)   # a process may go quiet for a long time; it is not polled
            while (got := wire.receive(conn, first=True)) is not None:
                wire.send(conn, self._answer(*got))
        except Exception:   # noqa: BLE001 - a broken or hostile peer ends only its own connection
            return
        finally:
            with self._lock:
                self._conns.discard(conn)
            conn.close()

    def _answer(self, head, body: bytes) -> list:
        if not (isinstance(head, list) and head and head[0] in QUERIES):
            return [False, f"unknown request {head!r:.60}; accepted: {', '.join(QUERIES)}"]
        op, args = head[0], head[1:]
        try:
            if op == "ingest":
                return [True, self.collector.ingest(args[0], body)]
            return [True, getattr(self.collector, op)(*args)]
        except Exception as e:   # a malformed request: say so; the collector's state is its own
            return [False, f"{type(e).__name__}: {e}"]

    def drop_connections(self) -> int:
        """Hang up on every connected process (they reconnect on their next round); how many.
        What a network failure does to a run, on purpose: tests/test_faults.py."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        return len(conns)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)   # wakes the accept() blocked in its thread (Linux)
        self.sock.close()
        self.drop_connections()
        self._thread.join(timeout=2)


class LocalLink:
    """The driver's own shipper's link to the collector: a wire.Connection's calls, in-process."""

    def __init__(self, collector):
        self.ingest, self.clock = collector.ingest, collector.clock

    def settimeout(self, seconds: float) -> None:
        pass

    def close(self) -> None:
        pass
