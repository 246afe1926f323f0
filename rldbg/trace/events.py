"""The one event record every process appends, and the constants naming its fields.

An event is a plain tuple (cheap to build, cheap to pickle):
    (ph, cat, name, ts_ns, dur_ns, role, rank, step, method, flow, args)
ph:   "X" slice, "i" instant, "C" counter sample (args = {series: value}),
      "D" one driver call (expanded into call/dispatch/send/wait/recv slices at export).
cat:  "call" (a rank serving a driver call), "transition", "user", "step", "memory", "ledger", "rldbg".
ts_ns is time.time_ns() on the recording process: one wall clock for every process, made
relative to the trace origin only at export.
"""
from __future__ import annotations

PH, CAT, NAME, TS, DUR, ROLE, RANK, STEP, METHOD, FLOW, ARGS = range(11)

SLICE, INSTANT, COUNTER, DRIVER_CALL = "X", "i", "C", "D"

# Counter event names; the exporter turns them into per-rank tracks "rank N <name> <series>".
MEMORY, LEDGER = "memory", "ledger"

# Transitions after which the named ledger categories should be (near) zero.
OFFLOADS = {
    "offload_optimizer": ("optimizer",),
    "offload_params": ("params", "grads"),
    "release_kv_cache": ("kv_cache",),
    "rollout_sleep": ("rollout_weights", "kv_cache"),
}
RELOADS = {"reload_optimizer", "reload_params", "rollout_wake"}
