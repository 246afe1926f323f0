"""The hybrid worker's ledger byte counts, in one process (no Ray): at every report of a step's
calls and transitions they equal a plain count of each category's tensors (what the report's
transition truth compares with memory), whichever offload and sleep settings move them."""
from __future__ import annotations

import pytest
import torch

from reference_trainer.config import load_config
from reference_trainer.data import PromptSource
from reference_trainer.single_controller.worker import RankInfo
from reference_trainer.tasks import build_tokenizer, get_task
from reference_trainer.workers import hybrid


def _plain(w, only):
    """Each category counted the obvious way: every tensor of it on the compute device."""
    on_dev = lambda ts: sum(t.numel() * t.element_size() for t in ts  # noqa: E731
                            if isinstance(t, torch.Tensor) and t.device.type == w.device.type)
    opt = [v for s in w.optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor) and v.numel() > 1]
    kv = [t for layer in getattr(w.rollout._cache, "layers", []) for t in (layer.keys, layer.values)]
    full = {"params": on_dev(w.model.parameters()),
            "grads": on_dev(p.grad for p in w.model.parameters() if p.grad is not None),
            "optimizer": on_dev(opt), "ref_params": on_dev(w.ref.parameters()),
            "rollout_weights": on_dev([*w.rollout.model.parameters(), *w.rollout.model.buffers()]),
            "kv_cache": on_dev(kv)}
    return {k: v for k, v in full.items() if only is None or k in only}


@pytest.mark.parametrize("overrides", [
    [],
    ["rollout.sleep_level=1"],
    ["offload.params=true", "offload.ref=true", "rollout.sleep_level=1"],
    ["offload.target=none"],
])
def test_ledger_reports_what_the_tensors_hold(overrides, tmp_path, monkeypatch):
    cfg = load_config("demo", overrides=["trace.enabled=false", f"trainer.run_dir={tmp_path}", *overrides])
    w = hybrid.ActorRolloutRefWorker(cfg, RankInfo(0, 1, "127.0.0.1", 0, "cpu", "p"))
    reports, said = [], {}
    monkeypatch.setattr(hybrid.instrument, "enabled", lambda: True)
    monkeypatch.setattr(hybrid.instrument, "ledger", said.__setitem__)
    real = w._report_ledger

    def report(only=None, counted=None):   # what a report says (walked or counted), beside a plain count then
        said.clear()
        real(only, counted)
        reports.append((dict(said), _plain(w, only)))
    monkeypatch.setattr(w, "_report_ledger", report)
    w.init_model()
    prompts = PromptSource(get_task("digit_shift", n_digits=1), build_tokenizer(), 4, 4, 0)
    for n in range(2):
        w.to_rollout_mode()
        batch = w.generate_sequences(prompts.batch(n))
        w.to_train_mode()
        batch.tensors["advantages"] = torch.randn(batch.tensors["responses"].shape)
        batch = batch.union(w.compute_log_prob(batch)).union(w.compute_ref_log_prob(batch))
        w.update_actor(batch)
    # gradients are gone by each report of a step (set to None after the update): give some
    for p in w._params[::2]:
        p.grad = torch.ones_like(p)
    w._report_ledger()
    assert len(reports) >= 18
    # an update reports only what changed: the optimizer's first state, at the first update alone
    after_updates = [got for got, _ in reports if set(got) == {"grads", "optimizer"}]
    assert len(after_updates) == 1 and after_updates[0]["optimizer"] > 0 and after_updates[0]["grads"] == 0
    for got, want in reports:
        assert got == want
    # the counts saw each category both held and empty
    seen = {k: {bool(got[k]) for got, _ in reports if k in got} for k in ("optimizer", "grads", "rollout_weights", "kv_cache")}
    assert seen["kv_cache"] == {True, False} and seen["grads"] == {True, False}
    assert seen["optimizer"] == seen["rollout_weights"] == {True, False}   # none before the first update


def test_rollout_weights_after_a_failed_sync_are_counted(tmp_path):
    """A level-2 sleep reports no rollout weights without counting them; a weight sync that fails
    part way has given some their storage back, and the count says so."""
    cfg = load_config("demo", overrides=["trace.enabled=false", f"trainer.run_dir={tmp_path}"])
    w = hybrid.ActorRolloutRefWorker(cfg, RankInfo(0, 1, "127.0.0.1", 0, "cpu", "p"))
    w.init_model()
    w.rollout.sleep(2)
    assert w._ledger({"rollout_weights"}) == _plain(w, {"rollout_weights"}) == {"rollout_weights": 0}
    with pytest.raises(ValueError, match="weight sync gave"):
        w.rollout.load_weights(list(w._named_weights())[:3])
    got = w._ledger({"rollout_weights"})
    assert got == _plain(w, {"rollout_weights"}) and got["rollout_weights"] > 0
    w.rollout.load_weights(w._named_weights())
    assert w._ledger() == _plain(w, None)
