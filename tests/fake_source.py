"""A synthetic, deterministic DataSource: dashboard-like actor rows and a hub-like event stream
shaped like the reference trainer's (colocated actor+reward ranks, a critic pool, hybrid-engine
transitions with memory and ledger samples). For the benchmark (256 workers, ~1M events) and the
SVG snapshot tests (fixed timestamps, so frames never flake). Events are generated per page from
one step's template, never held all at once.
"""
from __future__ import annotations

import copy

from rldbg.control.client import HubError
from rldbg.trace import events as ev
from rldbg.tui.data import EVENT_PAGE, FIRST_PAGE, INITIAL_WINDOW, PAGES_PER_POLL, DataSource, Snapshot

T0 = 1_700_000_000_000_000_000
MiB = 2**20
ACTOR_CALLS = [("to_rollout_mode", [("rollout_wake", 6), ("sync_weights", 4), ("offload_optimizer", 3)]),
               ("generate_sequences", []),
               ("to_train_mode", [("release_kv_cache", 3), ("rollout_sleep", 3), ("reload_optimizer", 4)])]
# What each transition declares it moves (instrument.transition(name, frees=..., loads=...)).
MOVES = {"rollout_wake": {"loads": ["rollout_weights"]},
         "sync_weights": {"frees": ["rollout_weights"], "loads": ["rollout_weights"]},
         "offload_optimizer": {"frees": ["optimizer"]}, "release_kv_cache": {"frees": ["kv_cache"]},
         "rollout_sleep": {"frees": ["rollout_weights"]}, "reload_optimizer": {"loads": ["optimizer"]}}
LEAK_PER_STEP = 32 * MiB    # rank 0's optimizer ledger after offload_optimizer, when leak=True
LATER = [("reward", "compute_scores"), ("actor", "compute_log_prob"), ("actor", "compute_ref_log_prob"),
         ("critic", "compute_values"), ("critic", "update_critic"), ("actor", "update_actor")]


def _ev(ph, cat, name, ts, dur, role, rank, step, method, flow=None, args=None):
    """One event in the hub's JSON form, built by the schema's constructors."""
    args = args or {}
    if ph == ev.SLICE:
        rec = ev.slice_event(cat, name, ts, dur, role, rank, step, method, flow, args)
    elif ph == ev.INSTANT:
        rec = ev.instant_event(cat, name, ts, role, rank, step, method, args)
    elif ph == ev.COUNTER:
        rec = ev.counter_event(cat, name, ts, role, rank, step, method, args)
    else:
        rec = ev.driver_call_event(name, ts, dur, step, method, flow, args)
    return ev.to_dict(rec)


class FakeSource(DataSource):
    address = "http://fake:8265"

    def __init__(self, workers: int = 4, events: int = 2_000, pending: bool = True, leak: bool = True):
        self.ranks = max(1, workers // 2)           # half the actors are actor+reward, half critic
        self.total, self.cursor = events, None
        self.leak = leak
        self.template, self.step_ns = self._template()
        self.step = max(0, (events - 1) // len(self.template))
        self.specs: list[str] = ["actor.update_actor@rank=1"]
        self.gate_state = {"armed": pending, "mode": "step", "target": None, "waiting": pending,
                           "pending": self._pending(), "last_result": self._result(), "timeout_s": 30.0,
                           "disarm_reason": None, "heartbeat_age_s": 0.5}
        self.beats = 0
        self.actions: list = []

    # ---- one step of events, as the trainer emits them ------------------------------------
    def _template(self):
        out, t, flow = [], 0, 0
        ms = 1_000_000

        def call(role, rank, method, start, dur, transitions=()):
            rss = (900 + 40 * rank) * MiB
            out.append(_ev("C", "memory", "memory", start, 0, role, rank, None, method, None, {"rss": rss}))
            tt = start + ms
            for name, d in transitions:
                rss += (-300 if "loads" not in MOVES[name] else 300) * MiB
                if "optimizer" in MOVES[name].get("frees", ()) and self.leak and rank == 0:
                    out.append(_ev("C", "ledger", "ledger", tt + d * ms - 1, 0, role, rank, None, method, None,
                                   {"optimizer": 0}))   # grows by LEAK_PER_STEP a step: see event()
                out.append(_ev("X", "transition", name, tt, d * ms, role, rank, None, method, None,
                               {"mem_before": rss + 300 * MiB, "mem_after": rss, **MOVES[name]}))
                out.append(_ev("C", "memory", "memory", tt + d * ms, 0, role, rank, None, method, None, {"rss": rss}))
                tt += d * ms + ms
            end = max(start + dur, tt)
            out.append(_ev("X", "call", method, start, end - start, role, rank, None, method, flow,
                           {"status": "ok"}))
            out.append(_ev("C", "memory", "memory", end, 0, role, rank, None, method, None, {"rss": rss}))
            return end

        out.append(_ev("i", "step", "step start", 0, 0, "driver", 0, None, None, None, {}))
        plan = [("actor", m, tr, 40 if m == "generate_sequences" else 5) for m, tr in ACTOR_CALLS]
        plan += [(role, m, (), 25 if m.startswith("update") else 10) for role, m in LATER]
        for role, method, tr, dur in plan:
            flow += 1
            ends = [call(role, r, method, t + ms, (dur + (r % 3)) * ms, tr) for r in range(self.ranks)]
            end = max(ends) + ms
            out.append(_ev("D", "call", f"{role}.{method}", t, end - t, "driver", 0, None, method, flow,
                           {"group": role, "status": "ok"}))
            t = end + 2 * ms
        out.append(_ev("X", "step", "step", 0, t, "driver", 0, None, None, None, {}))
        return out, t + 5 * ms

    def event(self, i: int) -> dict:
        step, k = divmod(i, len(self.template))
        e = copy.copy(self.template[k])
        e["ts_ns"] = T0 + step * self.step_ns + e["ts_ns"]
        e["step"] = step
        if e["name"] == "step":
            e["name"] = f"step {step}"
        if e["cat"] == "ledger" and "optimizer" in e["args"]:
            e["args"] = {"optimizer": (64 * MiB + step * LEAK_PER_STEP)}
        return e

    def _pending(self):
        keys = [{"key": "input_ids", "kind": "tensor", "shape": [8, 24], "dtype": "torch.int64", "nbytes": 1536},
                {"key": "attention_mask", "kind": "tensor", "shape": [8, 24], "dtype": "torch.int64", "nbytes": 1536},
                {"key": "uid", "kind": "array", "shape": [8], "dtype": "object", "nbytes": 64}]
        return {"id": 2, "group": "actor", "method": "generate_sequences", "mode": "DP_COMPUTE_PROTO",
                "world": self.ranks, "step": self.step, "phase": "before_dispatch",
                # every rank gets a shard, as in the trainer; the last one is short (an uneven batch)
                "shards": [{"rows": 8, "keys": keys} for _ in range(self.ranks - 1)] + [
                    {"rows": 7, "keys": [{**k, "shape": [7, *k["shape"][1:]], "nbytes": k["nbytes"] * 7 // 8} for k in keys]}]}

    def _result(self):
        return {"id": 1, "group": "actor", "method": "to_rollout_mode", "step": self.step, "rows": 16,
                "keys": [], "metrics": {"reward/mean": 0.4375, "actor/kl": 0.0012}}

    def actors(self) -> list[dict]:
        rows = []
        for pool, roles in enumerate(("actor+reward", "critic")):
            for r in range(self.ranks):
                i = pool * self.ranks + r
                rows.append({"actor_id": f"{i:032x}", "class_name": "Host", "state": "DEAD" if i == 2 * self.ranks - 1 else "ALIVE",
                             "repr_name": f"{roles}[rank {r}/{self.ranks}]", "pid": 4000 + i, "job_id": "01000000",
                             "node_id": "ab12cd34ef56" + f"{i % 4:02d}", "address": {}})
        return rows

    # ---- DataSource ---------------------------------------------------------------------------
    def poll(self) -> Snapshot:
        first = self.cursor is None
        if first:
            self.cursor = max(0, self.total - INITIAL_WINDOW)
        end = min(self.total, self.cursor + (FIRST_PAGE if first else EVENT_PAGE * PAGES_PER_POLL))
        events = [self.event(i) for i in range(self.cursor, end)]
        self.cursor = end
        state = {"job_id": "01000000", "step": self.step, "calls_done": 42, "gate": dict(self.gate_state),
                 "trace": {"enabled": True, "path": "/runs/demo/trace.json.gz"},
                 "breakpoints": {"specs": list(self.specs), "hits": [], "paused": [
                     {"role": "actor", "rank": 1, "step": self.step, "method": "update_actor", "pid": 4001,
                      "host": "127.0.0.1", "port": 51234, "file": "hybrid.py", "line": 120, "reason": "spec"}]},
                 "stats": {"trace": {"events": self.total, "dropped": 0}, "driver": {}, "hub": {}}}
        return Snapshot("connected", "", "01000000", "http://127.0.0.1:50001", self.actors(),
                        {4000: 512 * MiB}, state, events, [], self.total - self.cursor)

    def heartbeat(self) -> None:
        self.beats += 1

    def hub_client(self):
        return self   # the hub's actions are faked here too

    def gate(self, action: str, **kw) -> dict:
        self.actions.append((action, kw))
        self.gate_state.update(armed=action not in ("continue", "disarm"), waiting=action == "arm")
        return dict(self.gate_state)

    def add_breakpoint(self, spec: str) -> list:
        if "@" in spec and "=" not in spec.split("@", 1)[1]:
            raise HubError(f"bad breakpoint spec {spec!r} (hub, POST /api/breakpoints -> 400)", 400)
        self.specs.append(spec)
        return list(self.specs)

    def remove_breakpoint(self, spec: str) -> list:
        self.specs = [s for s in self.specs if s != spec]
        return list(self.specs)

    def export(self) -> dict:
        return {"path": "/runs/demo/trace.snapshot.json.gz", "events": self.total}

    def stacks(self, role, rank) -> str:
        return f"{role} rank {rank} in generate (hybrid.py:88) [active]\n    generate (hybrid.py:88)"
