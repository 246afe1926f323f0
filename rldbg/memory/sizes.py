"""Bytes held by tensors, modules and optimizers: what a worker reports through ledger().
torch is imported lazily so rldbg stays importable without it."""
from __future__ import annotations

from typing import Iterable


def tensor_bytes(tensors: Iterable) -> int:
    """Sum of element bytes; a storage shared by several views is counted once."""
    seen, total = set(), 0
    for t in tensors:
        if t is None or not hasattr(t, "untyped_storage"):
            continue
        try:
            st = t.untyped_storage()
            key = (st.data_ptr(), st.device.type, getattr(st.device, "index", None))
            if key in seen or st.data_ptr() == 0:
                continue
            seen.add(key)
            total += st.nbytes()
        except (RuntimeError, NotImplementedError):   # meta tensors and the like
            total += t.numel() * t.element_size()
    return total


def module_bytes(module) -> int:
    """Parameters and buffers of a torch.nn.Module."""
    return tensor_bytes(list(module.parameters()) + list(module.buffers()))


def grad_bytes(module) -> int:
    return tensor_bytes(p.grad for p in module.parameters() if p.grad is not None)


def optimizer_state_bytes(optim) -> int:
    """Tensors in a torch optimizer's state (Adam moments, step counters, ...)."""
    tensors = []
    for state in optim.state.values():
        for v in state.values():
            if hasattr(v, "untyped_storage"):
                tensors.append(v)
    return tensor_bytes(tensors)
