"""How a process talks to the collector over TCP: the framing, and the client end (Connection).

A message is HEADER then the head, msgpack (a request [op, *args], a reply [ok, value]), then the body, raw bytes: a
batch's events, packed by the sender exactly as the spill stores them, so the collector appends them without unpacking.
Nothing received is ever unpickled or run: msgpack only, sizes bounded. A connection opens with ["hello", token]; the
collector answers [True, the session's config] or [False, why] and hangs up. Requests and replies then alternate.
"""
from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading

import msgpack

MAGIC = b"RLT1"
HEADER = struct.Struct("<4sII")   # magic, head length, body length
MAX_HEAD = 64 << 20               # a head is a request's arguments or a reply (events for the TUI)
MAX_BODY = 512 << 20              # a batch's events: 20,000 events are a few MB
CONNECT_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 60.0             # a collector that takes longer is treated as gone (see recorder.py)


class WireError(ConnectionError):
    """The connection broke, timed out, was refused, or carried something that is not a message."""


class NotSent(WireError):
    """The connection was found broken before the request went out: the collector has not seen it."""


class Refused(WireError):
    """The collector answered, but said no (a wrong token, an unknown request)."""


def send(sock: socket.socket, head, body=b"") -> None:
    h = msgpack.packb(head, default=str, use_bin_type=True)
    sock.sendall(HEADER.pack(MAGIC, len(h), len(body)) + h)
    if body:
        sock.sendall(body)


def _exactly(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise WireError("the other end closed the connection")
        got += k
    return buf


def receive(sock: socket.socket, first: bool = False):
    """(head, body) of the next message. `first`: the header may be missing entirely (the peer
    hung up between messages): None then, instead of an error."""
    try:
        raw = _exactly(sock, HEADER.size)
    except WireError:
        if first:
            return None
        raise
    magic, nh, nb = HEADER.unpack(raw)
    if magic != MAGIC or nh > MAX_HEAD or nb > MAX_BODY:
        raise WireError(f"not an rldbg trace message (magic {bytes(magic)!r}, sizes {nh}/{nb})")
    head = msgpack.unpackb(_exactly(sock, nh), raw=False, strict_map_key=False)
    return head, (bytes(_exactly(sock, nb)) if nb else b"")


class Connection:
    """One client connection to the collector: calls are [op, *args] -> value, one at a time (a lock keeps two threads'
    messages apart). Every failure is a WireError; the caller decides what a broken connection means."""

    def __init__(self, address: str, token: str, timeout: float = CALL_TIMEOUT_S):
        host, _, port = address.rpartition(":")
        self.address = address
        self._lock = threading.Lock()
        try:
            self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S)
        except (OSError, ValueError) as e:
            raise WireError(f"cannot reach the trace collector at {address}: {e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        try:
            self.config = self.call("hello", token)
        except WireError:
            self.close()
            raise

    def call(self, op: str, *args, body=b""):
        with self._lock:
            try:
                # The collector never speaks first: anything readable now is its hang-up (the
                # driver went away, the connection was dropped). Found here, the request has not
                # been sent: the caller may send it again elsewhere (NotSent), not count it lost.
                if self._hung_up():
                    raise NotSent(f"the trace collector at {self.address} closed the connection")
                send(self.sock, [op, *args], body)
                got = receive(self.sock)
            except WireError:
                raise
            except (OSError, ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
                raise WireError(f"trace collector at {self.address}: {e}") from None
        head = got[0]
        if not (isinstance(head, list) and len(head) == 2):
            raise WireError(f"trace collector at {self.address} answered something else: {head!r:.80}")
        ok, value = head
        if not ok:
            raise Refused(f"trace collector at {self.address} refused {op!r}: {value}")
        return value

    def _hung_up(self) -> bool:
        # poll, not select: a busy process's socket may have a descriptor past select's 1024.
        p = select.poll()
        p.register(self.sock, select.POLLIN | select.POLLHUP | select.POLLERR)
        return bool(p.poll(0))

    # The calls a shipper makes (a LocalLink in the driver has the same two).
    def ingest(self, meta: dict, payload: bytes) -> int:
        return self.call("ingest", meta, body=payload)

    def clock(self) -> tuple:
        return tuple(self.call("clock"))

    def settimeout(self, seconds: float) -> None:
        self.sock.settimeout(seconds)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
