"""The step gate around real worker-group calls: a small driver loop (a GRPO step of the
reference trainer) whose worker-group calls pass the gate through the dispatch layer's seam.
Arm pauses it, step runs exactly one call, run_to_method / run_to_step skip ahead, continue
finishes; a TUI that stops heartbeating or a dead hub never wedges the run."""
from __future__ import annotations

import threading
import time

import pytest
import ray

import rldbg.control
from rldbg import instrument
from rldbg.control import gate
from rldbg.control.client import HubClient

from reference_trainer.advantage import compute_advantages
from small_trainer import small_trainer

WAIT_S = 90   # liveness bound for polls and joins, not a timing assertion


@pytest.fixture(scope="module")
def trainer(ray_cluster, tmp_path_factory):
    with small_trainer(tmp_path_factory.mktemp("gate")) as t:
        yield t


def _gated(group, method, *args):
    """One worker-group call: the dispatch layer's seam (instrument.call_ready /
    call_collected) passes it through the gate's two pause points."""
    return getattr(group, method)(*args)


def _grpo_step(step, batch, cfg, actor, reward):
    gate.set_step(step)
    with instrument.step(step):
        _gated(actor, "to_rollout_mode")
        batch = _gated(actor, "generate_sequences", batch)
        _gated(actor, "to_train_mode")
        batch = batch.union(_gated(reward, "compute_scores", batch))
        batch = batch.union(_gated(actor, "compute_log_prob", batch))
        batch = batch.union(_gated(actor, "compute_ref_log_prob", batch))
        batch = compute_advantages(batch, cfg.algorithm)
        _gated(actor, "update_actor", batch)


class Loop(threading.Thread):
    def __init__(self, trainer, steps):
        super().__init__(daemon=True)
        self.trainer, self.steps, self.error, self.done_steps = trainer, steps, None, 0

    def run(self):
        cfg, groups, src = self.trainer
        try:
            for s in range(self.steps):
                _grpo_step(s, src.batch(s), cfg, groups["actor"], groups["reward"])
                self.done_steps += 1
        except BaseException as e:   # surfaced by finish()
            self.error = e

    def finish(self):
        self.join(WAIT_S)
        assert not self.is_alive(), "the driver loop is still blocked"
        assert self.error is None, repr(self.error)


def _until(client, pred, beat=True):
    """Poll state (heartbeating, like the TUI) until pred(state) holds."""
    deadline = time.monotonic() + WAIT_S
    while True:
        if beat:
            client.heartbeat()
        s = client.state()
        if pred(s):
            return s
        assert time.monotonic() < deadline, s["gate"]
        time.sleep(0.1)


def _arm(client):
    """Arm, then wait for the driver's gate to see it (it polls the hub ~4x/s)."""
    client.gate("arm")
    deadline = time.monotonic() + WAIT_S
    while not gate.active().armed:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def _parked(s):
    return s["gate"]["waiting"]


def test_arm_step_run_to_method_run_to_step_continue(trainer):
    info = rldbg.control.start(gate_timeout_s=30.0)
    loop = Loop(trainer, steps=2)
    try:
        c = HubClient(info["url"], info["token"])
        _arm(c)
        loop.start()
        s = _until(c, _parked)
        first = s["gate"]["pending"]
        assert first["phase"] == "before_dispatch" and first["method"] == "to_rollout_mode"
        assert first["step"] == 0 and first["world"] == 2 and s["calls_done"] == 0
        for _ in range(8):   # ~1 s of polling: nothing moves while parked
            time.sleep(0.12)
            s = c.state()
            assert s["gate"]["waiting"] and s["gate"]["pending"] == first and s["calls_done"] == 0
        # step from before_dispatch: that call runs and stops after its collect
        c.gate("step")
        s = _until(c, lambda s: _parked(s) and s["gate"]["pending"]["phase"] == "after_collect")
        assert s["gate"]["pending"]["id"] == first["id"] and s["calls_done"] == 1
        # step from after_collect: on to the next call's before_dispatch, with its per-rank shards
        c.gate("step")
        s = _until(c, lambda s: _parked(s) and s["gate"]["pending"]["phase"] == "before_dispatch")
        gen = s["gate"]["pending"]
        assert gen["method"] == "generate_sequences" and s["calls_done"] == 1
        assert [sh["rows"] for sh in gen["shards"]] == [8, 8]
        assert {k["key"] for k in gen["shards"][0]["keys"]} >= {"input_ids"}
        # run_to_method: free-run to update_actor's dispatch
        c.gate("run_to_method", method="update_actor")
        s = _until(c, lambda s: _parked(s) and s["gate"]["pending"]["method"] == "update_actor")
        assert s["gate"]["pending"]["phase"] == "before_dispatch" and s["gate"]["mode"] == "step"
        assert s["calls_done"] == 6 and loop.done_steps == 0
        c.gate("step")
        s = _until(c, lambda s: _parked(s) and s["gate"]["pending"]["phase"] == "after_collect")
        res = s["gate"]["last_result"]
        assert res["method"] == "update_actor" and res["step"] == 0 and res["id"] == s["gate"]["pending"]["id"]
        assert res["metrics"] and all(isinstance(v, float) for v in res["metrics"].values())
        # run_to_step: the first call of step 1
        assert c.gate("run_to_step")["target"] == "0"
        s = _until(c, lambda s: _parked(s) and s["gate"]["pending"]["step"] == 1)
        assert s["gate"]["pending"]["method"] == "to_rollout_mode" and loop.done_steps == 1
        c.gate("continue")
        loop.finish()
        # the driver reports progress on its next poll (~0.25 s), then the hub shows every call
        s = _until(c, lambda s: s["calls_done"] == 14)
        assert s["gate"]["armed"] is False and loop.done_steps == 2
    finally:
        rldbg.control.stop()
        loop.join(WAIT_S)


def test_a_tui_that_stops_heartbeating_releases_the_run(trainer):
    info = rldbg.control.start(gate_timeout_s=2.0)
    loop = Loop(trainer, steps=1)
    try:
        c = HubClient(info["url"], info["token"])
        _arm(c)
        loop.start()
        _until(c, _parked)
        loop.finish()   # no more heartbeats: the hub disarms after 2 s and the driver runs on
        s = _until(c, lambda s: s["calls_done"] == 7, beat=False)
        assert s["gate"]["armed"] is False and "no heartbeat for 2 s" in s["gate"]["disarm_reason"]
    finally:
        rldbg.control.stop()
        loop.join(WAIT_S)


def test_a_dead_hub_releases_the_run(trainer):
    info = rldbg.control.start(gate_timeout_s=30.0)
    loop = Loop(trainer, steps=1)
    try:
        c = HubClient(info["url"], info["token"])
        _arm(c)
        loop.start()
        _until(c, _parked)
        ray.kill(rldbg.control.hub_handle())
        loop.finish()
        assert gate.active() is not None and gate.active().hub_alive is False
    finally:
        rldbg.control.stop()
        loop.join(WAIT_S)
    assert gate.active() is None
