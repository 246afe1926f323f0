"""How a call's DataProto arguments and results cross the Ray boundary between the driver and a rank.

Ray sends an argument or a return value whose serialized size is under its inline limit
(`max_direct_call_object_size`, 100 KiB by default) inside the task's own messages, driver to actor
and back. Anything bigger goes through the object store: a put, a seal, a fetch by the other side,
each a round trip through the raylet. On 2 shared cores, one 192 KiB array echoed through the store
took 5.4 ms against 2.6 ms for the same bytes as four inline arguments and four inline returns.

So a DataProto of more than one part's worth of tensor bytes, and at most MAX_PARTS parts, travels
as a small head plus parts of at most PART_BYTES (DataProto.to_parts): extra positional arguments on
the way in, extra return values (`num_returns`) on the way back. The number of return slots is fixed when the call is sent, so it is
sized from the rank's input; a result that needs more parts than that puts the rest in its last slot,
which then goes through the object store as before (correct, only slower). Calls without a DataProto
over one part send and return their values as they are.
"""
from __future__ import annotations

import os

from reference_trainer.protocol import DataProto

# Ray's own inline limit (its RAY_max_direct_call_object_size setting, when set), less room for
# the pickle and msgpack framing around a part's bytes.
_RAY_INLINE = int(os.environ.get("RAY_max_direct_call_object_size", 100 * 1024))
PART_BYTES = max(1024, _RAY_INLINE - 4 * 1024)
# Parts per call and direction: each inline part costs about 1.2 ms of messaging on 2 shared cores,
# one object-store trip about 6 ms plus 0.45 ms per 96 KiB (one actor echo: 4 parts 4.4 vs 7.2 ms,
# 16 parts 18.8 vs 13.6 ms), so beyond ~8 parts the store is faster and a batch goes whole.
MAX_PARTS = 6


class Wired:
    """Stands for a DataProto argument: its head, and where its parts sit among the extra arguments."""

    __slots__ = ("head", "first", "count")

    def __init__(self, head: tuple, first: int, count: int):
        self.head, self.first, self.count = head, first, count

    def __reduce__(self):
        return Wired, (self.head, self.first, self.count)


def encode_call(args: tuple, kwargs: dict, cache: dict) -> tuple[tuple, dict, list, int]:
    """(args, kwargs, parts, return slots): big DataProtos swapped for Wired heads whose parts follow
    as extra arguments. `cache` (id -> (head, parts)) lets ranks that get the same batch share one cut."""
    parts: list = []
    slots = 1

    def swap(value):
        nonlocal slots
        if not isinstance(value, DataProto) or value.tensor_nbytes <= PART_BYTES:
            return value
        if len(parts) + -(-value.tensor_nbytes // PART_BYTES) > MAX_PARTS:
            return value   # big: the object store moves it faster
        cut = cache.get(id(value))
        if cut is None:
            cut = cache[id(value)] = value.to_parts(PART_BYTES)
        head, these = cut
        wired = Wired(head, len(parts), len(these))
        parts.extend(these)
        slots += len(these)
        return wired

    new_args = tuple(swap(a) for a in args)
    new_kwargs = {k: swap(v) for k, v in kwargs.items()}
    return new_args, new_kwargs, parts, slots


def decode_call(args: tuple, n_args: int, kwargs: dict) -> tuple[tuple, dict]:
    """The rank's side of encode_call: the first n_args are the call's own, the rest are parts."""
    own, parts = args[:n_args], args[n_args:]

    def unswap(value):
        if isinstance(value, Wired):
            return DataProto.from_parts(value.head, parts[value.first:value.first + value.count])
        return value

    return tuple(unswap(a) for a in own), {k: unswap(v) for k, v in kwargs.items()}


def encode_result(out, slots: int) -> tuple:
    """`slots` return values: (head, part, part, ..., rest) for a big DataProto, else (out, None, ...)."""
    if slots < 2 or not isinstance(out, DataProto) or out.tensor_nbytes <= PART_BYTES:
        return (out,) + (None,) * (slots - 1)
    head, parts = out.to_parts(PART_BYTES)
    room = slots - 1
    if len(parts) > room:   # more than the input's size: the last slot carries the rest (object store)
        parts = parts[:room - 1] + [tuple(parts[room - 1:])]
    return (Wired(head, 0, len(parts)),) + tuple(parts) + (None,) * (room - len(parts))


def decode_result(values: list):
    """The driver's side of encode_result (values: the rank's return slots, in order)."""
    first = values[0]
    if not isinstance(first, Wired):
        return first
    parts: list = []
    for v in values[1:1 + first.count]:
        parts.extend(v if isinstance(v, tuple) else (v,))
    return DataProto.from_parts(first.head, parts)
