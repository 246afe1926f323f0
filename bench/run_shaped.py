"""A spill shaped like a traced reference-trainer run's, for the export and report benches
(bench/bench_trace.py): what the synthetic mix there leaves out is what a real run's events cost
the exporter and the report (args that repeat the layout's keys, a template per step, driver
calls expanded into seven slices, mostly counters)."""
from __future__ import annotations

from rldbg.trace import events as ev
from rldbg.trace.spill import SpillWriter

# What a reference-trainer step records per rank (2 ranks, the demo's hybrid actor): its five
# registered calls, the hybrid engine's transitions inside them, ledger counters, and memory
# samples (two per call from the call hook, the rest from the 10 Hz sampler), with the args a
# traced demo's spill holds. The mix made here: 42% memory samples, 41% ledger counters, 8%
# transitions, 5% call slices, 3% driver calls, 1% step marks (a traced 20-step demo's spill:
# 46 / 32 / 11 / 7 / 3 / 1).
_RUN_CALLS = ("to_rollout_mode", "generate_sequences", "compute_scores", "to_train_mode", "update_actor")
_RUN_TRANSITIONS = {"to_rollout_mode": ("rollout_wake", "sync_weights", "offload_grads", "offload_optimizer"),
                    "to_train_mode": ("release_kv_cache", "rollout_sleep", "reload_optimizer", "reload_grads")}
_RUN_LEDGER = ("params", "grads", "optimizer", "rollout_weights", "kv_cache")


def write(n_events: int, spill: str) -> int:
    """A spill of about n_events shaped like a traced reference-trainer run's (above): the args a
    worker call, a transition and a driver call really carry (role/rank/step/method inside a call
    slice's args, tuples of ledger categories, shards), flows joining each driver call to its
    rank slices. Returns the events written."""
    w = SpillWriter(spill, {"origin_ns": 1_700_000_000_000_000_000, "job_id": "bench-run"})
    t, flow, written, step, ranks = 1_700_000_000_000_000_000, 0, 0, 0, 2
    drv = {"pid": 1, "host": "h", "dropped": 0}
    while written < n_events:
        by_rank: list[list] = [[] for _ in range(ranks)]
        driver = [ev.instant_event("step", "step start", t, "driver", 0, step, None, {"step": step})]
        t_step = t
        for method in _RUN_CALLS:
            flow += 1
            t_call = t
            for r in range(ranks):
                out, tr = by_rank[r], t_call + 50_000 + r * 1_000
                out.append(ev.memory_event(tr, "actor", r, step, method, {"rss": 470_000_000 + r}))
                for name in _RUN_TRANSITIONS.get(method, ()):
                    cat = _RUN_LEDGER[len(out) % len(_RUN_LEDGER)]
                    out.append(ev.transition_event(name, tr + 1_000, 500_000, "actor", r, step, method, {
                        "role": "actor", "rank": r, "step": step, "method": method, "tags": "weights",
                        "loads": (cat,), "mem_before": 470_000_000, "mem_after": 468_000_000}))
                    for c in _RUN_LEDGER:
                        out.append(ev.ledger_event(tr + 600_000, "actor", r, step, method, c, 2_654_720))
                    out.append(ev.memory_event(tr + 700_000, "actor", r, step, method, {"rss": 468_000_000}))
                    tr += 1_000_000
                for k in range(4):   # the 10 Hz sampler during the call
                    out.append(ev.memory_event(tr + k * 100_000, "actor", r, step, method, {"rss": 469_000_000}))
                out.append(ev.slice_event("call", method, t_call + 50_000 + r * 1_000, tr + 500_000 - t_call, "actor",
                                          r, step, method, flow, {
                                              "role": "actor", "rank": r, "step": step, "method": method,
                                              "flow": flow, "group": "actor", "mem_before": 470_000_000,
                                              "mem_after": 469_000_000}))
                out.append(ev.memory_event(tr + 500_000, "actor", r, step, method, {"rss": 469_000_000}))
                t = max(t, tr + 600_000)
            driver.append(ev.driver_call_event(f"actor.{method}", t_call, t - t_call + 100_000, step, method, flow, {
                "group": "actor", "mode": "DP_COMPUTE_PROTO", "world": ranks, "status": "ok",
                "t_dispatched": t_call + 40_000,
                "shards": tuple({"rows": 8, "nbytes": 196_608, "keys": ("input_ids", "attention_mask")}
                                for _ in range(ranks))}))
            driver.append(ev.memory_event(t, "driver", 0, step, None, {"rss": 456_000_000}))
            t += 200_000
        driver.append(ev.slice_event("step", f"step {step}", t_step, t - t_step, "driver", 0, step, None, None,
                                     {"step": step}))
        for r, out in enumerate(by_rank):
            w.write({"pid": 100 + r, "host": "h", "dropped": 0, "events": out})
            written += len(out)
        w.write(dict(drv, events=driver))
        written += len(driver)
        step += 1
        t += 1_000_000
    w.close()
    return written
