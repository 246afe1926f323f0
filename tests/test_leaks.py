"""The leak rule (rldbg.memory.leaks) on hand-made cycles: warm-up steps and single jumps are not
leaks; steady growth of >= 20 MiB per cycle is, named by rank and category. The end-to-end checks
(real Ray ranks, a real trainer run, `rldbg report` as a subprocess) are in test_report.py and
test_trace_trainer.py."""
from rldbg.memory.leaks import UNACCOUNTED, describe, leak_suspicions, observe

MiB = 1 << 20


def _cycles(role, rank, levels, ledger_levels=None):
    out = []
    for i, mem in enumerate(levels):
        ledger = {"optimizer": ledger_levels[i]} if ledger_levels else {}
        out.append(observe(role, rank, "offload_optimizer", i, i * 1000, ("optimizer",), mem, ledger))
    return out


def test_warmup_and_single_jumps_are_not_leaks():
    base = 900 * MiB
    warm = [base, base + 40 * MiB] + [base + 58 * MiB] * 20          # the demo's allocator warm-up
    jump = [base] * 6 + [base + 200 * MiB] * 6                        # one late jump (a cache grown once)
    noisy = [base + (25 * MiB if i % 2 else 0) for i in range(30)]    # RSS going up and down
    creep = [base + i * MiB for i in range(150)]                       # 1 MiB/cycle: not a >= 20 MiB leak
    cycles = _cycles("actor", 0, warm) + _cycles("actor", 1, jump) + _cycles("critic", 0, noisy) \
        + _cycles("critic", 1, creep)

    assert leak_suspicions(cycles) == []


def test_steady_growth_names_rank_and_category():
    base = 900 * MiB
    flat = [base] * 8
    leaky_ledger = [i * 24 * MiB for i in range(8)]
    cycles = _cycles("actor", 0, flat, [0] * 8) \
        + _cycles("actor", 1, [base + v for v in leaky_ledger], leaky_ledger) \
        + _cycles("ref", 0, [base + i * 30 * MiB for i in range(8)])
    found = {(s["role"], s["rank"], s["category"]): s for s in leak_suspicions(cycles)}
    assert set(found) == {("actor", 1, "optimizer"), ("ref", 0, UNACCOUNTED)}
    assert abs(found[("actor", 1, "optimizer")]["bytes_per_cycle"] - 24 * MiB) < 2
    assert found[("actor", 1, "optimizer")]["cycles"] == 6     # the first 2 are warm-up
    assert "actor rank 1: ledger 'optimizer' grows 24.0 MiB per cycle after offload_optimizer" in \
        describe(found[("actor", 1, "optimizer")])


def test_too_few_cycles_and_undeclared_transitions_say_nothing():
    assert leak_suspicions(_cycles("actor", 0, [i * 100 * MiB for i in range(7)])) == []   # 5 after warm-up
    assert observe("actor", 0, "sync_weights", 0, 0, (), 123, {}) is None


def test_top_flags_only_the_leaky_rank():
    # `rldbg top`'s store applies the same rule live: the synthetic source's rank 0 keeps 32 MiB
    # more optimizer ledger per step; its peers, and a source without the leak, are not flagged.
    from fake_source import FakeSource
    from rldbg.tui.model import EventStore

    for leak, expected in [(True, ["actor rank 0: ledger 'optimizer' grows 32.0 MiB per cycle"]), (False, [])]:
        src, store = FakeSource(workers=4, events=3_000, leak=leak), EventStore()
        for _ in range(3):
            store.add(src.poll().events)
        assert [f[:len(expected[0])] if expected else f for f in store.flags.values()] == expected
