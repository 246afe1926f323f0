"""The non-finite sentinel: every registered call's tensor outputs (and the driver's merged result) are checked for
NaN/Inf, and the first bad value is named where it appeared: role, rank, method, step, the output key and how many
elements. mode() is "stop" | "warn" | "off" (RLDBG_ON_NONFINITE, default stop); CallScope(role, rank, method, step) is
what worker_call yields (.returned(out) checks, .raised(exc) saves); check_merged() is the driver's check.

Cost: one fused isfinite().all() per floating tensor and one host sync per output. Outputs are
walked generically (tensors, dicts, lists/tuples, a `.tensors` mapping, a `.batch` mapping as in
VeRL's DataProto). A failing call's inputs and output are saved under RLDBG_FAILURES_DIR as
<step>-<role>-<rank>-<method>/{inputs.pt, output.pt, info.json, error.txt}.
"""
from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

from rldbg import switches
from rldbg.extras import need

MODES = ("stop", "warn", "off")
EVENT = "nonfinite"            # the instant's name in the trace
_MAX_DEPTH = 4

_mode: list = [None]            # set by configure() (driver), else read from the environment once
_failures: list = [None]


class NonFinite(RuntimeError):
    """A call produced NaN/Inf: who, where, which key and how many elements, in one line."""

    def __init__(self, role: str, rank, method: str, step, key: str, count: int, numel: int, saved: str | None = None):
        self.role, self.rank, self.method, self.step = role, rank, method, step
        self.key, self.count, self.numel, self.saved = key, count, numel, saved
        super().__init__(describe({"role": role, "rank": rank, "method": method, "step": step, "key": key,
                                   "count": count, "numel": numel, "saved": saved}))

    def __reduce__(self):
        return (NonFinite, (self.role, self.rank, self.method, self.step, self.key, self.count, self.numel, self.saved))


def describe(a: dict) -> str:
    """One line for a non-finite alarm's args (also what `rldbg report` and `rldbg top` print)."""
    who = f"{a.get('role')} rank {a.get('rank')}" if a.get("rank") is not None else f"{a.get('role')} (merged)"
    when = f" at step {a['step']}" if a.get("step") is not None else ""
    of = f" of {a['numel']}" if a.get("numel") else ""
    line = (f"non-finite output: {who} {a.get('method')}{when}: {a.get('key')!r} has {a.get('count')}"
            f"{of} NaN/Inf element(s)")
    if a.get("saved"):
        line += f"; inputs and output saved to {a['saved']}"
    return line


def configure(mode: str | None = None, failures: str | None = None) -> None:
    """Set this process's mode and failures directory (the driver, from its config); None: the
    environment's (RLDBG_ON_NONFINITE, RLDBG_FAILURES_DIR), as on workers."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"on_nonfinite={mode!r}; accepted: {', '.join(MODES)}")
    _mode[0], _failures[0] = mode, failures


def mode() -> str:
    if _mode[0] is None:
        m = os.environ.get(switches.ON_NONFINITE, "stop").strip().lower() or "stop"
        _mode[0] = m if m in MODES else "stop"
    return _mode[0]


def _tensors(obj, prefix: str = "", depth: int = 0):
    """(key, tensor) for every floating tensor in obj, walked generically."""
    torch = sys.modules.get("torch")
    if torch is None or depth > _MAX_DEPTH:
        return
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() or obj.is_complex():
            yield prefix, obj
        return
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif isinstance(inner := getattr(obj, "tensors", None), dict):
        items = inner.items()
    else:
        # A batch of named tensors under .batch (VeRL's DataProto holds a TensorDict there):
        # its keys are what a user knows the outputs by.
        batch = getattr(obj, "batch", None)
        if batch is None or not (callable(getattr(batch, "items", None)) and callable(getattr(batch, "keys", None))):
            return
        items = batch.items()
    for k, v in items:
        yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k), depth + 1)


def find(obj):
    """None when every floating tensor in obj is finite, else (key, count, numel) of the first
    that is not. One isfinite().all() per tensor and one sync for all of them."""
    found = list(_tensors(obj))
    if not found:
        return None
    import torch

    flags = [torch.isfinite(t).all() for _, t in found]
    one_device = len({f.device for f in flags}) == 1   # one sync for all; across devices, one each
    if bool(torch.stack(flags).all()) if one_device else all(bool(f) for f in flags):
        return None
    for (key, t), ok in zip(found, flags):
        if not bool(ok):
            return key, int((~torch.isfinite(t)).sum()), int(t.numel())


def save_failure(role: str, rank, method: str, step, args=(), kwargs=None, output=None,
                 error: str | None = None, info: dict | None = None) -> str | None:
    """Write a failing call's inputs, output and error under the failures directory; returns
    the directory (None when none is configured, or when saving failed: it never masks the error)."""
    root = _failures[0] or os.environ.get(switches.FAILURES_DIR)
    if not root:
        return None
    where = Path(root) / f"{'init' if step is None else step}-{role}-{'merged' if rank is None else rank}-{method}"
    try:
        torch = need("torch", "saving a failing call's inputs", "torch")
        where.mkdir(parents=True, exist_ok=True)
        torch.save({"args": tuple(args or ()), "kwargs": dict(kwargs or {})}, where / "inputs.pt")
        if output is not None:
            torch.save(output, where / "output.pt")
        if error:
            (where / "error.txt").write_text(error)
        meta = {"role": role, "rank": rank, "method": method, "step": step, "pid": os.getpid(), **(info or {})}
        (where / "info.json").write_text(json.dumps(meta, indent=1, default=str))
    except Exception as e:  # noqa: BLE001 - a failed save must not hide the failure being reported
        print(f"rldbg: could not save the failing call to {where}: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    return str(where.resolve())


def post_mortem_on() -> bool:
    return any(os.environ.get(k, "") not in ("", "0") for k in (switches.POST_MORTEM, switches.RAY_POST_MORTEM))


class CallChecks:
    """What a registered call's scope checks: its output (returned) and its error (raised). Reads
    role, rank, method and step from the scope: CallScope below, or rldbg.instrument.worker_call."""

    __slots__ = ()

    def returned(self, out, args=(), kwargs=None):
        """Check the call's output; warn or raise NonFinite (mode), saving inputs and output."""
        if mode() == "off":
            return out
        if (bad := find(out)) is not None:
            _alarm(self.role, self.rank, self.method, self.step, bad, args, kwargs, out)
        return out

    def raised(self, exc: BaseException, args=(), kwargs=None) -> str | None:
        """Save a failed call's inputs and error (post-mortem off); returns the directory."""
        if post_mortem_on() or isinstance(exc, NonFinite):
            return None
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        saved = save_failure(self.role, self.rank, self.method, self.step, args, kwargs, error=text)
        if saved:
            print(f"rldbg: {self.role} rank {self.rank} {self.method} failed; inputs and error saved to {saved}",
                  file=sys.stderr, flush=True)
        return saved


class CallScope(CallChecks):
    """One registered call on a rank, as rldbg.instrument.worker_call yields it."""

    __slots__ = ("role", "rank", "method", "step")

    def __init__(self, role: str, rank, method: str, step):
        self.role, self.rank, self.method, self.step = role, rank, method, step


def check_merged(role: str, method: str, step, result, args=(), kwargs=None):
    """The driver's check of what a call's ranks merged into (rank None: the merged result)."""
    return CallScope(role, None, method, step).returned(result, args, kwargs)


_warned: set = set()


def _alarm(role, rank, method, step, bad, args, kwargs, out) -> None:
    key, count, numel = bad
    saved = save_failure(role, rank, method, step, args, kwargs, output=out,
                         info={"key": key, "count": count, "numel": numel})
    from rldbg.api import instant
    from rldbg.trace import runtime

    # A merged result's alarm is recorded by the controller, on its own track (whose role and rank
    # the trace's layout gives the instant): the group it came from goes in args of its own.
    merged = {"merged_from": role} if rank is None else {}
    instant(EVENT, role=role, rank=rank, method=method, step=step, key=key, count=count, numel=numel,
            saved=saved, **merged)
    # The alarm leaves this process now, not at the next shipping round: the process may be gone by then (stopped by
    # NonFinite, or its actor killed with its worker group), and a flight recorder dumps sooner.
    runtime.flush()
    err = NonFinite(role, rank, method, step, key, count, numel, saved)
    if mode() == "stop":
        raise err
    if (role, rank, method, key) not in _warned:   # warn mode: once per place, the trace has every one
        _warned.add((role, rank, method, key))
        print(f"rldbg warning: {err}", file=sys.stderr, flush=True)


def alarms(instants: list) -> list[dict]:
    """The non-finite alarms among a read trace's instants (rldbg.trace.report_trace.Trace: {name, ts, args}, ts in ns),
    oldest first. A controller's check of a merged result names the group it merged, not a rank."""
    out = []
    for e in sorted((e for e in instants if e["name"] == EVENT), key=lambda e: e["ts"]):
        a = e["args"]
        row = {k: a.get(k) for k in ("role", "rank", "method", "step", "key", "count", "numel", "saved")}
        if a.get("merged_from"):
            row["role"], row["rank"] = a["merged_from"], None
        out.append(row)
    return out


def state_suffix(a: dict) -> str:
    """What `rldbg top`'s Roles view adds to the state of a rank that raised the alarm."""
    return f", NaN/Inf in {a.get('method')}" + (f" step {a['step']}" if a.get("step") is not None else "")


def render(found: list[dict]) -> list[str]:
    """`rldbg report`'s lines for the alarms."""
    return ["non-finite values:"] + [f"  {describe(a)}" for a in found] if found else ["non-finite values: none"]
