"""Bootstrap intervals for the benches' ratios: how far a figure could move with other samples
drawn from the same machine. A bench says "met" or "not met" only when the interval lies on one
side of its goal; these machines are shared, and a single ratio can be off by several %.

interval(): items measured side by side (a block of ours beside a block of theirs, a traced block
beside the untraced block next to it) are resampled as units, so drift that hits both halves of
a pair alike stays out of the spread. ratio_interval(): two independent sets of samples.
"""
from __future__ import annotations

import random
import statistics


def interval(items: list, fn, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """5th and 95th percentiles of fn(resample of items)."""
    return grouped_interval([items], fn, draws, seed)


def grouped_interval(groups: list, fn, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """5th and 95th percentiles of fn(every group resampled within itself, joined): runs that each
    keep their weight, whatever their rounds' scatter."""
    rng = random.Random(seed)
    vals = sorted(fn([x for g in groups for x in rng.choices(g, k=len(g))]) for _ in range(draws))
    return vals[int(0.05 * draws)], vals[int(0.95 * draws) - 1]


def ratio_interval(off: list, on: list, stat=statistics.median, draws: int = 2000,
                   seed: int = 0) -> tuple[float, float]:
    """5th and 95th percentiles of stat(on) / stat(off), each side resampled on its own."""
    rng = random.Random(seed)
    ratios = sorted(stat(rng.choices(on, k=len(on))) / stat(rng.choices(off, k=len(off))) for _ in range(draws))
    return ratios[int(0.05 * draws)], ratios[int(0.95 * draws) - 1]


def verdict(lo: float, hi: float, goal: float, at_least: bool) -> str:
    """'met' / 'NOT met' when the whole interval is on one side of the goal, else unresolved."""
    good, bad = (lo >= goal, hi < goal) if at_least else (hi <= goal, lo > goal)
    return "met" if good else "NOT met" if bad else "not resolved by this run (more rounds)"
