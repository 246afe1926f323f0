"""DataProto: the batch envelope passed between the driver and worker groups.

Row-aligned data: ``tensors`` (torch, dim 0 = rows), ``non_tensors`` (1-D numpy arrays, object or
numeric) and free-form ``meta``, with two reserved meta keys:
* ``metrics``: ``dict[str, list[float]]``, concatenated by ``concat`` and merged by ``union``;
  ``chunk``/``split`` keep them on the first part only, so re-joining the parts does not duplicate them.
* ``num_pad_rows``: how many *trailing* rows are ``pad_to_divisor`` padding. Every row selection
  recomputes it, so each data-parallel shard knows its own padding and ``valid_mask()`` excludes it.

Pickling (and so Ray): CPU tensors travel as numpy views that protocol 5 sends out-of-band, without
copies; dtypes numpy lacks (bfloat16, float8...) as a same-width integer view plus a dtype tag. Other
tensors (CUDA, requiring grad, sparse, subclasses) use torch's default pickling; moving them to CPU
first is the caller's choice.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Sequence

import numpy as np
import torch

PAD_KEY = "num_pad_rows"
METRICS_KEY = "metrics"

# dtypes numpy lacks travel as an integer view of the same width plus their name. Listed up front because
# finding them by a failing Tensor.numpy() costs ~40 us per tensor (the exception), 10x the whole fast path.
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_NUMPY_LACKS = {
    d: (_INT_VIEW[d.itemsize], name)
    for name in ("bfloat16", "complex32", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "float8_e8m0fnu")
    if isinstance(d := getattr(torch, name, None), torch.dtype)
}

_REDUCERS = {"/max": max, "/min": min, "/sum": math.fsum}


def _as_non_tensor(key: str, value: Any) -> np.ndarray:
    arr = value
    if isinstance(value, (list, tuple)):
        # Filling element by element keeps lists of equal-length lists 1-D (np.array would make them 2-D).
        arr = np.empty(len(value), dtype=object)
        for i, item in enumerate(value):
            arr[i] = item
    elif not isinstance(value, np.ndarray):
        raise TypeError(f"DataProto: non_tensor {key!r} is {type(value).__name__}; expected np.ndarray or list")
    if arr.ndim != 1:
        raise ValueError(f"DataProto: non_tensor {key!r} has shape {arr.shape}; non_tensors must be 1-D")
    return arr


def _copy_meta(meta: dict, keep_metrics: bool = True) -> dict:
    # Metrics lists are copied so appending to one batch never shows up in another.
    out = {k: v for k, v in meta.items() if k != METRICS_KEY}
    metrics = meta.get(METRICS_KEY)
    if keep_metrics and metrics is not None:  # a malformed value is kept as is for _check to report
        out[METRICS_KEY] = {k: list(v) if isinstance(v, list) else v for k, v in metrics.items()} \
            if isinstance(metrics, dict) else metrics
    return out


def _values_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        # torch.equal alone says int [1, 2] equals float [1., 2.]; a silent dtype change is a conflict too.
        both = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        return both and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    try:
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
        return bool(a == b)
    except (ValueError, TypeError, RuntimeError):  # e.g. object arrays holding arrays compare ambiguously
        return False


def _require(keys: Iterable[str], store: dict, where: str, kind: str) -> list[str]:
    keys = list(keys)
    missing = [k for k in keys if k not in store]
    if missing:
        raise KeyError(f"DataProto.{where}: no {kind} {missing}; available: {list(store)}")
    return keys


class DataProto:
    """Row-aligned batch: ``tensors`` + ``non_tensors`` + ``meta``; see the module docstring."""

    __slots__ = ("tensors", "non_tensors", "meta")

    def __init__(self, tensors: dict | None = None, non_tensors: dict | None = None, meta: dict | None = None):
        self.tensors: dict[str, torch.Tensor] = dict(tensors or {})
        self.non_tensors: dict[str, np.ndarray] = {k: _as_non_tensor(k, v)
                                                   for k, v in (non_tensors or {}).items()}
        if meta is not None and not isinstance(meta, dict):
            raise TypeError(f"DataProto: meta is {type(meta).__name__}; expected dict")
        self.meta: dict = _copy_meta(meta or {})
        self._check()

    @classmethod
    def from_dict(cls, tensors: dict | None = None, non_tensors: dict | None = None,
                  meta: dict | None = None) -> "DataProto":
        return cls(tensors, non_tensors, meta)

    def _check(self) -> None:
        for key, value in self.tensors.items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"DataProto: tensor {key!r} is {type(value).__name__}; expected torch.Tensor")
            if value.dim() == 0:
                raise ValueError(f"DataProto: tensor {key!r} is 0-d; tensors need a leading batch dim")
        rows = [(f"tensor {k!r}", t.shape[0]) for k, t in self.tensors.items()]
        rows += [(f"non_tensor {k!r}", a.shape[0]) for k, a in self.non_tensors.items()]
        for name, n in rows[1:]:
            if n != rows[0][1]:
                raise ValueError(f"DataProto: row counts differ: {rows[0][0]} has {rows[0][1]} rows "
                                 f"but {name} has {n}")
        metrics = self.meta.get(METRICS_KEY, {})
        if not isinstance(metrics, dict) or not all(isinstance(v, list) for v in metrics.values()):
            raise ValueError("DataProto: meta['metrics'] must be dict[str, list[float]]; use add_metrics()")
        pad = self.meta.get(PAD_KEY, 0)
        if not isinstance(pad, int) or not 0 <= pad <= len(self):
            raise ValueError(f"DataProto: meta['{PAD_KEY}']={pad!r} must be an int in [0, {len(self)}]")

    def __len__(self) -> int:
        first = next(iter((*self.tensors.values(), *self.non_tensors.values())), None)
        return 0 if first is None else int(first.shape[0])

    def keys(self) -> list[str]:
        return [*self.tensors, *self.non_tensors]

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.non_tensors

    @property
    def num_pad_rows(self) -> int:
        return int(self.meta.get(PAD_KEY, 0))

    @property
    def nbytes(self) -> int:
        """Bytes held by tensors and arrays (object arrays count their pointers only)."""
        return sum(d["nbytes"] for d in self.describe())

    def describe(self) -> list[dict]:
        """One row per column for a debugger UI: key, kind, shape, dtype, nbytes."""
        out = [{"key": k, "kind": "tensor", "shape": tuple(t.shape), "dtype": str(t.dtype).removeprefix("torch."),
                "nbytes": t.numel() * t.element_size()} for k, t in self.tensors.items()]
        return out + [{"key": k, "kind": "non_tensor", "shape": a.shape, "dtype": str(a.dtype), "nbytes": a.nbytes}
                      for k, a in self.non_tensors.items()]

    def __repr__(self) -> str:
        cols = ", ".join(f"{d['key']}: {d['dtype']}{list(d['shape'])}" for d in self.describe())
        pad = f", pad={self.num_pad_rows}" if self.num_pad_rows else ""
        return f"DataProto(rows={len(self)}{pad}, {{{cols}}}, meta={sorted(self.meta)})"

    def __getitem__(self, item: Any) -> Any:
        """int / slice / bool mask / index tensor, array or list -> DataProto; str -> that column."""
        if isinstance(item, str):
            if item not in self:
                raise KeyError(f"DataProto has no key {item!r}; available: {self.keys()}")
            return self.tensors[item] if item in self.tensors else self.non_tensors[item]
        n = len(self)
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            if not -n <= (i := int(item)) < n:
                raise IndexError(f"DataProto index {i} out of range for {n} rows")
            return self._take(slice(i % n, i % n + 1))  # a 1-row batch, so shapes keep their batch dim
        if isinstance(item, slice):  # torch has no negative-step slicing; such slices become an index
            return self._take(item if (item.step or 1) > 0 else torch.tensor(range(n)[item], dtype=torch.long))
        return self._take(self._as_index(item, n))

    @staticmethod
    def _as_index(item: Any, n: int) -> torch.Tensor:
        idx = torch.as_tensor(np.asarray(item) if isinstance(item, (list, tuple)) else item)
        if idx.dim() != 1:
            raise IndexError(f"DataProto index must be 1-D; got shape {tuple(idx.shape)}")
        if idx.dtype == torch.bool:
            if idx.numel() != n:
                raise IndexError(f"DataProto bool mask has {idx.numel()} entries for {n} rows")
            return idx.nonzero().squeeze(1)
        if idx.numel() and (idx.is_floating_point() or idx.is_complex()):
            raise IndexError(f"DataProto index must be int or bool; got {idx.dtype}")
        idx = idx.long()
        bad = idx[(idx < -n) | (idx >= n)]
        if bad.numel():
            raise IndexError(f"DataProto index {int(bad[0])} out of range for {n} rows")
        return torch.where(idx < 0, idx + n, idx)

    def _take(self, sel: slice | torch.Tensor, keep_metrics: bool = True) -> "DataProto":
        # Slices give views (no copy); index tensors give copies, as torch and numpy do.
        if isinstance(sel, slice):
            tensors = {k: t[sel] for k, t in self.tensors.items()}
            non_tensors = {k: a[sel] for k, a in self.non_tensors.items()}
        else:
            np_sel = sel.cpu().numpy()
            tensors = {k: t[sel.to(t.device)] for k, t in self.tensors.items()}
            non_tensors = {k: a[np_sel] for k, a in self.non_tensors.items()}
        meta = _copy_meta(self.meta, keep_metrics)
        if PAD_KEY in meta:
            meta[PAD_KEY] = self._pad_rows_in(sel)
        return DataProto(tensors, non_tensors, meta)

    def _pad_rows_in(self, sel: slice | torch.Tensor) -> int:
        n, pad = len(self), self.num_pad_rows
        rows = torch.arange(*sel.indices(n)) if isinstance(sel, slice) else sel.cpu()
        is_pad = rows >= n - pad
        k = int(is_pad.sum())
        if k and not bool(is_pad[len(rows) - k:].all()):
            raise ValueError(f"DataProto: this selection puts some of its {k} padding rows before real rows, but "
                             "padding must stay trailing; call unpad() before reordering a padded batch")
        return k

    def select(self, tensor_keys: Iterable[str] | None = None, non_tensor_keys: Iterable[str] | None = None,
               meta_keys: Iterable[str] | None = None) -> "DataProto":
        """New DataProto sharing the chosen columns (no copy); None means all of that kind."""
        def pick(store: dict, keys: Iterable[str] | None, kind: str) -> dict:
            return dict(store) if keys is None else {k: store[k] for k in _require(keys, store, "select", kind)}

        return DataProto(pick(self.tensors, tensor_keys, "tensor"), pick(self.non_tensors, non_tensor_keys,
                         "non_tensor"), pick(_copy_meta(self.meta), meta_keys, "meta key"))

    def pop(self, tensor_keys: Iterable[str] = (), non_tensor_keys: Iterable[str] = ()) -> "DataProto":
        """Remove columns from self and return them (meta copied, metrics stay with self)."""
        tensor_keys = _require(tensor_keys, self.tensors, "pop", "tensor")
        non_tensor_keys = _require(non_tensor_keys, self.non_tensors, "pop", "non_tensor")
        popped = DataProto({k: self.tensors.pop(k) for k in tensor_keys},
                           {k: self.non_tensors.pop(k) for k in non_tensor_keys}, _copy_meta(self.meta, False))
        for batch in (popped, self):  # a batch left without columns has no rows to be padding
            if not batch.keys():
                batch.meta.pop(PAD_KEY, None)
        return popped

    def union(self, other: "DataProto") -> "DataProto":
        """Merge other's columns and meta into self (in place) and return self."""
        if self.keys() and other.keys() and len(self) != len(other):
            raise ValueError(f"DataProto.union: row counts differ: {len(self)} vs {len(other)}")
        other_meta = _copy_meta(other.meta, keep_metrics=False)
        for kind, mine, theirs in (("tensor", self.tensors, other.tensors), ("meta", self.meta, other_meta),
                                   ("non_tensor", self.non_tensors, other.non_tensors)):
            for key, value in theirs.items():
                if key in mine and not _values_equal(mine[key], value):
                    raise ValueError(f"DataProto.union: {kind} {key!r} differs between the two batches")
        self.tensors.update(other.tensors)
        self.non_tensors.update(other.non_tensors)
        self.meta.update(other_meta)
        self.add_metrics(other.meta.get(METRICS_KEY, {}))
        self._check()
        return self

    def split(self, sizes: Sequence[int]) -> list["DataProto"]:
        """Consecutive parts of the given sizes (views). Metrics stay on the first part only."""
        sizes = [int(s) for s in sizes]
        if any(s < 0 for s in sizes) or sum(sizes) != len(self):
            raise ValueError(f"DataProto.split: sizes {sizes} must be >= 0 and sum to {len(self)} rows")
        ends = np.cumsum(sizes).tolist()
        return [self._take(slice(end - size, end), keep_metrics=(i == 0))
                for i, (size, end) in enumerate(zip(sizes, ends))]

    def chunk(self, n: int) -> list["DataProto"]:
        """n equal parts, each with its own meta['num_pad_rows'] when self is padded."""
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"DataProto.chunk: n={n!r}; expected an int >= 1")
        if len(self) % n:
            raise ValueError(f"DataProto.chunk: {len(self)} rows do not split into {n} equal chunks; "
                             f"call pad_to_divisor({n}) first")
        return self.split([len(self) // n] * n)

    @staticmethod
    def concat(parts: Sequence["DataProto"]) -> "DataProto":
        """Join parts row-wise: metrics lists concatenated, other meta from the first part."""
        parts = list(parts)
        if not parts:
            raise ValueError("DataProto.concat: got no parts; expected a non-empty list")
        first = parts[0]
        for i, p in enumerate(parts[1:], start=1):
            if set(p.tensors) != set(first.tensors) or set(p.non_tensors) != set(first.non_tensors):
                raise ValueError(f"DataProto.concat: part {i} has keys {sorted(p.keys())} "
                                 f"but part 0 has {sorted(first.keys())}")
        tensors = {}
        for k in first.tensors:
            try:
                tensors[k] = torch.cat([p.tensors[k] for p in parts])
            except RuntimeError as e:
                raise ValueError(f"DataProto.concat: tensor {k!r} does not concatenate: "
                                 f"{str(e).splitlines()[0]}") from None
        non_tensors = {k: np.concatenate([p.non_tensors[k] for p in parts]) for k in first.non_tensors}
        out = DataProto(tensors, non_tensors, _copy_meta(first.meta, keep_metrics=False))
        for p in parts:
            out.add_metrics(p.meta.get(METRICS_KEY, {}))
        if any(PAD_KEY in p.meta for p in parts):
            # Joined padding stays trailing only if every part after the first padded one is all padding.
            pads = [p.num_pad_rows for p in parts]
            first_padded = next((i for i, pad in enumerate(pads) if pad), len(pads))
            for i in range(first_padded + 1, len(parts)):
                if pads[i] != len(parts[i]):
                    raise ValueError(f"DataProto.concat: part {i} has real rows after padding rows of an earlier "
                                     "part; unpad() the parts before joining them")
            out.meta[PAD_KEY] = sum(pads)
        return out

    def repeat(self, times: int, interleave: bool = True) -> "DataProto":
        """interleave: r0 r0 r1 r1 ... (e.g. n samples per prompt); otherwise the whole batch tiled."""
        if not isinstance(times, int) or times < 1:
            raise ValueError(f"DataProto.repeat: times={times!r}; expected an int >= 1")
        rows = torch.arange(len(self))
        return self._take(rows.repeat_interleave(times) if interleave else rows.repeat(times))

    def pad_to_divisor(self, divisor: int) -> tuple["DataProto", int]:
        """Append copies of rows from the start (wrapping) so len % divisor == 0; padding is marked trailing."""
        if not isinstance(divisor, int) or divisor < 1:
            raise ValueError(f"DataProto.pad_to_divisor: divisor={divisor!r}; expected an int >= 1")
        n, pad = len(self), -len(self) % divisor
        if pad and n == 0:
            raise ValueError("DataProto.pad_to_divisor: cannot pad an empty batch (no rows to copy)")
        unmarked = DataProto(self.tensors, self.non_tensors, {k: v for k, v in self.meta.items() if k != PAD_KEY})
        out = unmarked._take(torch.cat([torch.arange(n), torch.arange(pad) % n]) if pad else slice(None))
        out.meta[PAD_KEY] = self.num_pad_rows + pad  # padding added earlier is still trailing
        return out, pad

    def unpad(self, pad_size: int) -> "DataProto":
        """Drop the last pad_size rows; the padding mark shrinks accordingly (and is cleared at 0)."""
        n, marked = len(self), self.meta.get(PAD_KEY)
        if not isinstance(pad_size, int) or not 0 <= pad_size <= n:
            raise ValueError(f"DataProto.unpad: pad_size={pad_size!r}; expected an int in [0, {n}]")
        if marked is not None and pad_size > marked:
            raise ValueError(f"DataProto.unpad: pad_size={pad_size} but only {marked} trailing rows are padding")
        out = self._take(slice(0, n - pad_size))
        if out.meta.get(PAD_KEY) == 0:
            del out.meta[PAD_KEY]
        return out

    def valid_mask(self) -> torch.Tensor:
        """BoolTensor[len]: False on trailing padding rows (which must not contribute to a loss)."""
        device = next(iter(self.tensors.values())).device if self.tensors else "cpu"
        return torch.arange(len(self), device=device) < len(self) - self.num_pad_rows

    def to(self, device: str | torch.device, non_blocking: bool = False) -> "DataProto":
        self.tensors = {k: t.to(device, non_blocking=non_blocking) for k, t in self.tensors.items()}
        return self

    def contiguous(self) -> "DataProto":
        self.tensors = {k: t.contiguous() for k, t in self.tensors.items()}
        self.non_tensors = {k: np.ascontiguousarray(a) for k, a in self.non_tensors.items()}
        return self

    def add_metrics(self, metrics: dict[str, Any]) -> "DataProto":
        for key, value in metrics.items():
            try:
                floats = [float(v) for v in (value if isinstance(value, (list, tuple, np.ndarray)) else [value])]
            except (TypeError, ValueError):
                raise ValueError(f"DataProto.add_metrics: {key!r} has non-numeric value {value!r}") from None
            self.meta.setdefault(METRICS_KEY, {}).setdefault(key, []).extend(floats)
        return self

    def __reduce__(self):
        packed = {k: _pack_tensor(t) for k, t in self.tensors.items()}
        return _rebuild_dataproto, (packed, self.non_tensors, self.meta)

    @property
    def tensor_nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def to_parts(self, part_bytes: int) -> tuple[tuple, list[np.ndarray]]:
        """(head, parts): the tensors' bytes laid end to end and cut into uint8 arrays of at most
        `part_bytes`, and a small head (layout, non-tensors, meta) that from_parts rebuilds the batch
        from. Ray ships an object under its inline limit inside the task message itself, skipping the
        object store's round trips; a batch cut to that size travels that way (single_controller.transport).
        Tensors that pickling would not send as numpy (see _pack_tensor) travel in the head as they are."""
        if not isinstance(part_bytes, int) or part_bytes < 1:
            raise ValueError(f"DataProto.to_parts: part_bytes={part_bytes!r}; expected an int >= 1")
        layout, views, whole = [], [], {}
        for key, t in self.tensors.items():
            packed = _pack_tensor(t)
            if isinstance(packed, torch.Tensor):
                whole[key] = packed
                layout.append((key, None, None, None, 0))
                continue
            arr, tag = packed
            layout.append((key, arr.dtype.str, arr.shape, tag, arr.nbytes))
            views.append(arr.reshape(-1).view(np.uint8))
        flat = np.concatenate(views) if len(views) > 1 else (views[0] if views else np.empty(0, np.uint8))
        parts = [flat[i:i + part_bytes] for i in range(0, flat.nbytes, part_bytes)]
        return (layout, part_bytes, whole, self.non_tensors, self.meta), parts

    @staticmethod
    def from_parts(head: tuple, parts: Sequence[np.ndarray]) -> "DataProto":
        """The batch to_parts cut into (head, parts); every tensor gets its own writable storage."""
        layout, part_bytes, whole, non_tensors, meta = head
        tensors, offset = {}, 0
        for key, dtype_str, shape, tag, nbytes in layout:
            if dtype_str is None:
                tensors[key] = whole[key]
                continue
            buf = _gather(parts, part_bytes, offset, nbytes)
            offset += nbytes
            t = torch.from_numpy(buf.view(np.dtype(dtype_str)).reshape(shape))
            if tag is not None:
                if not isinstance(dtype := getattr(torch, tag, None), torch.dtype):
                    raise ValueError(f"DataProto: unknown dtype tag {tag!r} in a serialized batch")
                t = t.view(dtype)
            tensors[key] = t
        return _rebuild_dataproto({}, non_tensors, meta, tensors)


def _gather(parts: Sequence[np.ndarray], part_bytes: int, start: int, nbytes: int) -> np.ndarray:
    """Bytes [start, start + nbytes) of the parts laid end to end, copied into a fresh array."""
    out = np.empty(nbytes, np.uint8)
    done, i, pos = 0, start // part_bytes, start % part_bytes
    while done < nbytes:
        piece = parts[i][pos:pos + nbytes - done]
        out[done:done + piece.nbytes] = piece
        done += piece.nbytes
        i, pos = i + 1, 0
    return out


def _pack_tensor(t: torch.Tensor) -> torch.Tensor | tuple[np.ndarray, str | None]:
    """(numpy view, dtype name or None): numpy arrays go out-of-band under pickle protocol 5, while torch
    pickles storages in-band via torch.save, a sliced tensor with its whole storage. Else the tensor itself."""
    if type(t) is not torch.Tensor or not t.is_cpu or t.requires_grad or t.layout != torch.strided or t.is_quantized:
        return t
    t = (t.resolve_conj().resolve_neg() if t.is_complex() else t).contiguous()
    if (lacked := _NUMPY_LACKS.get(t.dtype)) is not None:
        return t.view(lacked[0]).numpy(), lacked[1]
    try:
        return t.numpy(), None
    except (TypeError, RuntimeError):  # a dtype numpy lacks that is not listed, or a lazy negation view
        return t


def _unpack_tensor(packed: torch.Tensor | tuple[np.ndarray, str | None]) -> torch.Tensor:
    if isinstance(packed, torch.Tensor):
        return packed
    arr, dtype_name = packed
    # Ray hands out read-only views of its object store: torch warns on them, and an in-place op would rewrite the
    # stored object for every later reader (seen in a test). So copy: ~40 us per 384 KiB (bench_serialization).
    t = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
    if dtype_name is None:
        return t
    if not isinstance(dtype := getattr(torch, dtype_name, None), torch.dtype):
        raise ValueError(f"DataProto: unknown dtype tag {dtype_name!r} in a serialized batch")
    return t.view(dtype)


def _rebuild_dataproto(packed: dict, non_tensors: dict, meta: dict, tensors: dict | None = None) -> DataProto:
    non_tensors = {k: a if a.flags.writeable else a.copy() for k, a in non_tensors.items()}
    return DataProto(tensors if tensors is not None else {k: _unpack_tensor(p) for k, p in packed.items()},
                     non_tensors, meta)


def reduce_metrics(metrics: dict[str, list[float]]) -> dict[str, float]:
    """Mean per key; keys ending in '/max', '/min' or '/sum' use that reduction instead."""
    out = {}
    for key, values in metrics.items():
        values = [float(v) for v in values]
        if not values:
            raise ValueError(f"reduce_metrics: metric {key!r} has no values")
        out[key] = _REDUCERS.get(key[key.rfind("/"):], statistics.fmean)(values)  # "a/b/max" -> "/max"
    return out
