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


def test_rldbg_top_names_a_sleep_that_never_returns_its_bytes_and_only_that_rank():
    """The store `rldbg top` folds events into judges transitions as `rldbg report` does
    (rldbg.analysis.transitions.Live): rank 1's sleep frees 96 MiB by its ledger but its device
    memory stays, every cycle; rank 0's returns it. Events as the hub serves them."""
    from rldbg.trace.events import ledger_event, memory_event, to_dict, transition_event
    from rldbg.tui.model import EventStore

    MiB = 1 << 20
    store, events, t = EventStore(), [], 1_000_000_000
    for step in range(6):
        for rank in (0, 1):
            dev = 2000 * MiB
            events.append(ledger_event(t, "actor", rank, step, "generate", "rollout_weights", 96 * MiB))
            t0, t1 = t + 1_000_000, t + 3_000_000
            before = {"rss": 500 * MiB, "cuda_allocated": 900 * MiB, "cuda_reserved": 1200 * MiB, "device_used": dev}
            freed = 0 if rank == 1 else 96 * MiB
            after = {"rss": 500 * MiB, "cuda_allocated": 900 * MiB - freed, "cuda_reserved": 1200 * MiB - freed,
                     "device_used": dev - freed}
            events.append(memory_event(t0, "actor", rank, step, "to_train_mode", before))
            events.append(ledger_event(t1 - 1000, "actor", rank, step, "to_train_mode", "rollout_weights", 0))
            events.append(transition_event("rollout_sleep", t0, t1 - t0, "actor", rank, step, "to_train_mode",
                                           {"frees": ["rollout_weights"], "mem_before": dev, "mem_after": dev - freed}))
            events.append(memory_event(t1, "actor", rank, step, "to_train_mode", after))
        t += 100_000_000
    for i in range(0, len(events), 7):   # polls cut the stream anywhere, even between a transition and its end sample
        store.add([to_dict(e) for e in events[i:i + 7]])
    flags = [f for k, f in store.flags.items() if k[0] == "not_returned"]
    assert len(flags) == 1, store.flags
    assert flags[0].startswith("actor rank 1: rollout_sleep frees 96.0 MiB (rollout_weights) but returns 0.0 MiB "
                               "to the GPU, every cycle (5 after warm-up): not freed"), flags
