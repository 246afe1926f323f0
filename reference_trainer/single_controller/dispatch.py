"""Dispatch modes: how a driver call's arguments are split across ranks, and how the
ranks' results are merged back. A mode is a (dispatch, collect) pair; custom pairs are
registered with `register_dispatch_mode`.

dispatch(world, args, kwargs) -> (per_rank, state)
    per_rank[i] is (args, kwargs) for rank i, or None when rank i does not run the call.
collect(outputs, state) -> result
    outputs holds the results of the ranks that ran, in rank order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from reference_trainer.protocol import DataProto


@dataclass(frozen=True)
class DispatchMode:
    name: str
    dispatch: Callable[[int, tuple, dict], tuple[list, Any]]
    collect: Callable[[list, Any], Any]
    # True when collect returns only what the ranks returned, as is or concatenated: every value in
    # the result was already checked by its rank's non-finite sentinel, so the driver does not check
    # it again (on 2 busy cores that second check cost 0.5 ms to 50 ms per 384 KiB call: torch's
    # intra-op threads wait for a core). Custom collects may compute, so they are checked.
    merges_only: bool = False

    def __repr__(self) -> str:
        return f"Dispatch.{self.name}"


def _one_to_all(world, args, kwargs):
    return [(args, kwargs)] * world, None


def _all_to_all(world, args, kwargs):
    for where, value in [*enumerate(args), *kwargs.items()]:
        if not isinstance(value, (list, tuple)) or len(value) != world:
            got = f"{type(value).__name__} of length {len(value)}" if isinstance(value, (list, tuple)) else type(value).__name__
            raise TypeError(
                f"argument {where!r} must be a list with one entry per rank ({world}); got {got}"
            )
    return [
        (tuple(a[i] for a in args), {k: v[i] for k, v in kwargs.items()}) for i in range(world)
    ], None


def _collect_list(outputs, state):
    return list(outputs)


def _dp_proto(world, args, kwargs):
    protos = [v for v in [*args, *kwargs.values()] if isinstance(v, DataProto)]
    if not protos:
        raise TypeError(
            "DP_COMPUTE_PROTO splits DataProto arguments across ranks, but the call got none; "
            "wrap the batch in DataProto.from_dict(...) or use ONE_TO_ALL"
        )
    sizes = {len(p) for p in protos}
    if len(sizes) != 1:
        raise ValueError(f"DP_COMPUTE_PROTO: DataProto arguments differ in rows {sorted(sizes)}; they must match")
    rows = sizes.pop()
    if rows == 0:
        raise ValueError("DP_COMPUTE_PROTO: the batch has 0 rows; there is nothing to split across ranks")

    def split(v):
        if not isinstance(v, DataProto):
            return [v] * world
        padded, _ = v.pad_to_divisor(world)
        return padded.chunk(world)

    arg_chunks = [split(a) for a in args]
    kw_chunks = {k: split(v) for k, v in kwargs.items()}
    pad_size = (-rows) % world
    per_rank = [
        (tuple(c[i] for c in arg_chunks), {k: c[i] for k, c in kw_chunks.items()}) for i in range(world)
    ]
    return per_rank, pad_size


def _dp_proto_collect(outputs, pad_size):
    if all(isinstance(o, DataProto) for o in outputs):
        merged = DataProto.concat(outputs)
        if pad_size and len(merged):
            merged = merged.unpad(pad_size)
        return merged
    return list(outputs)


def _rank_zero(world, args, kwargs):
    return [(args, kwargs)] + [None] * (world - 1), None


def _collect_first(outputs, state):
    return outputs[0]


class Dispatch:
    """The built-in modes. Refer to them as Dispatch.DP_COMPUTE_PROTO etc."""

    ONE_TO_ALL = DispatchMode("ONE_TO_ALL", _one_to_all, _collect_list, merges_only=True)
    ALL_TO_ALL = DispatchMode("ALL_TO_ALL", _all_to_all, _collect_list, merges_only=True)
    DP_COMPUTE = DispatchMode("DP_COMPUTE", _all_to_all, _collect_list, merges_only=True)
    DP_COMPUTE_PROTO = DispatchMode("DP_COMPUTE_PROTO", _dp_proto, _dp_proto_collect, merges_only=True)
    RANK_ZERO = DispatchMode("RANK_ZERO", _rank_zero, _collect_first, merges_only=True)


_MODES: dict[str, DispatchMode] = {
    m.name: m for m in vars(Dispatch).values() if isinstance(m, DispatchMode)
}


def register_dispatch_mode(name: str, dispatch_fn, collect_fn) -> DispatchMode:
    """Add a custom dispatch/collect pair, usable as @register(dispatch_mode=name)."""
    if name in _MODES:
        raise ValueError(f"dispatch mode {name!r} already exists; known modes: {sorted(_MODES)}")
    mode = DispatchMode(name, dispatch_fn, collect_fn)
    _MODES[name] = mode
    return mode


def resolve_mode(mode: DispatchMode | str) -> DispatchMode:
    if isinstance(mode, DispatchMode):
        return mode
    if mode not in _MODES:
        raise ValueError(f"unknown dispatch mode {mode!r}; known modes: {sorted(_MODES)}")
    return _MODES[mode]


def shard_summary(args: tuple, kwargs: dict) -> dict:
    """What one rank receives, for traces and the stepper: rows, keys, shapes, bytes."""
    for v in [*args, *kwargs.values()]:
        if isinstance(v, DataProto):
            return {"rows": len(v), "keys": v.describe()}
    return {"rows": None, "keys": []}


def result_summary(result) -> dict | None:
    """What came back from a call, for traces and the stepper: shapes and reduced metrics."""
    if isinstance(result, DataProto):
        from reference_trainer.protocol import reduce_metrics

        return {"rows": len(result), "keys": result.describe(),
                "metrics": reduce_metrics(result.meta.get("metrics", {}))}
    return None
