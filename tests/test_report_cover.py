"""The report's interval arithmetic (rldbg.analysis.cover.Cover): the time a role or the driver is
busy inside steps, and the idle part of a gap, equal clipping every interval against every
window and taking the union, without multiplying a long run's steps by its calls."""
from __future__ import annotations

import random

from rldbg.analysis.cover import Cover


def _brute(intervals, windows) -> int:
    """Clip each interval to each window, then the length of the union: the definition."""
    pieces = sorted((max(a, wa), min(b, wb)) for a, b in intervals for wa, wb in windows if max(a, wa) < min(b, wb))
    total, end = 0, None
    for a, b in pieces:
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def test_cover_equals_clipping_every_interval_against_every_window():
    rng = random.Random(12)
    for _ in range(3000):
        iv = [(a, a + rng.randint(-3, 40)) for a in (rng.randint(0, 200) for _ in range(rng.randint(0, 30)))]
        w = [(a, a + rng.randint(-3, 60)) for a in (rng.randint(0, 200) for _ in range(rng.randint(0, 8)))]
        assert Cover(iv).of(Cover(w)) == _brute(iv, w), (iv, w)
        lo, hi = rng.randint(-10, 220), rng.randint(-10, 240)
        assert Cover(iv).within(lo, hi) == _brute(iv, [(lo, hi)]), (iv, lo, hi)


def test_a_long_run_is_answered_without_multiplying_steps_by_calls():
    # 10,000 steps of 20 calls: clipping each call against each step would be 2e9 steps of Python.
    steps = [(s * 1_000, s * 1_000 + 900) for s in range(10_000)]
    calls = [(c * 50, c * 50 + 30) for c in range(200_000)]
    cover = Cover(calls)
    assert cover.of(Cover(steps)) == sum(_brute([c for c in calls[s * 20:s * 20 + 20]], [w]) for s, w in enumerate(steps))
    assert [cover.within(a, b) for a, b in steps[:3]] == [540, 540, 540]
