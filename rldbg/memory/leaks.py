"""The one leak rule, shared by `rldbg report` (trace/report.py) and `rldbg top` (tui/model.py).

The rule, in one sentence:
    ignoring its first WARMUP_CYCLES (2) cycles, a rank is named when what it still holds right after
    a transition that declares `frees=...` (each freed ledger category, and "unaccounted": the memory
    no ledger category accounts for, i.e. all of its device memory, or RSS on CPU, when it keeps no
    ledger) grows by at least LEAK_BYTES_PER_CYCLE (20 MiB) per cycle in BOTH halves of the remaining
    cycles (least-squares slope, at least MIN_CYCLES (6) cycles).

Why this shape: a healthy run's memory after an offload steps up once or twice early on (the
allocator and caches warming up), then stays flat or wobbles; warm-up is skipped, a one-off jump
lifts only one half, and a wobble has no slope, while a real leak adds bytes every cycle and so
raises both halves. Ledger categories name the leak where the trainer keeps a ledger
(rldbg.instrument.ledger); "unaccounted" catches what the ledger cannot see. Each rank is judged on
its own numbers, so its healthy peers are not named. Runs shorter than WARMUP_CYCLES + MIN_CYCLES
cycles get no verdict.
"""
from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20
LEAK_BYTES_PER_CYCLE = 20 * MiB
WARMUP_CYCLES = 2
MIN_CYCLES = 6
UNACCOUNTED = "unaccounted"


@dataclass(frozen=True)
class Cycle:
    """One observation: what role/rank holds right after one run of a freeing transition."""

    role: str
    rank: int
    transition: str
    step: int | None
    ts: int
    held: dict          # category (or UNACCOUNTED) -> bytes held right after the transition


def observe(role: str, rank: int, transition: str, step, ts: int, frees, mem_after, ledger: dict) -> Cycle | None:
    """The Cycle for a transition that ended at `ts`, or None when it declares nothing freed.
    `ledger` is the rank's ledger as last reported by then ({category: bytes}, maybe empty);
    `mem_after` its device memory (RSS on CPU) sampled as the transition ended, or None."""
    if not frees:
        return None
    held = {c: int(ledger[c]) for c in frees if c in ledger}
    if mem_after is not None:
        held[UNACCOUNTED] = int(mem_after) - sum(int(v) for v in ledger.values())
    return Cycle(role, rank, transition, step, ts, held) if held else None


def _slope(values: list) -> float:
    n = len(values)
    mx, my = (n - 1) / 2, sum(values) / n
    return sum((i - mx) * (v - my) for i, v in enumerate(values)) / sum((i - mx) ** 2 for i in range(n))


def leak_suspicions(cycles, threshold: int = LEAK_BYTES_PER_CYCLE, warmup: int = WARMUP_CYCLES,
                    min_cycles: int = MIN_CYCLES) -> list[dict]:
    """Apply the rule (module docstring) to Cycles of any ranks and transitions, in any order.
    Returns one dict per (role, rank, transition, category) that leaks: role, rank, transition,
    category, bytes_per_cycle (the smaller half's slope), cycles (counted after warm-up),
    first_bytes, last_bytes, step (of the newest cycle)."""
    by_key: dict = {}
    for c in cycles:
        by_key.setdefault((c.role, c.rank, c.transition), []).append(c)
    found = []
    for (role, rank, transition), cs in sorted(by_key.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], kv[0][2])):
        cs = sorted(cs, key=lambda c: c.ts)[warmup:]
        for cat in sorted({k for c in cs for k in c.held}):
            values = [c.held[cat] for c in cs if cat in c.held]
            n = len(values)
            if n < max(min_cycles, 4):
                continue
            per_cycle = min(_slope(values[:(n + 1) // 2]), _slope(values[n // 2:]))
            if per_cycle >= threshold:
                found.append({"role": role, "rank": rank, "transition": transition, "category": cat,
                              "bytes_per_cycle": int(per_cycle), "cycles": n,
                              "first_bytes": values[0], "last_bytes": values[-1], "step": cs[-1].step})
    return found


def describe(s: dict) -> str:
    """One line for a suspicion, the same in the report and in `rldbg top`."""
    what = "memory no ledger category accounts for" if s["category"] == UNACCOUNTED else f"ledger '{s['category']}'"
    return (f"{s['role']} rank {s['rank']}: {what} grows {s['bytes_per_cycle'] / MiB:.1f} MiB per cycle "
            f"after {s['transition']} ({s['cycles']} cycles after warm-up, "
            f"{s['first_bytes'] / MiB:.1f} -> {s['last_bytes'] / MiB:.1f} MiB)")
