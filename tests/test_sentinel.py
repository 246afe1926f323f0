"""The non-finite sentinel, run as users run the trainer (`python -m reference_trainer`, its own
embedded cluster): a reward NaN from a user's task (tests/nan_reward_task.py, plugged in with
data.task=MODULE:CLASS) on rank 1 at step 1 stops the run at that step with one line naming reward
rank 1 compute_scores step 1 'scores'; the trace holds the instant on that rank's track, `rldbg
report` and the TUI's model show it, and the failing call's inputs and output are on disk. A healthy
run raises no alarm. The checker itself: healthy outputs pass, the first bad key and its count are
named, warn/off modes. The product config carries no switch for tests."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rldbg import sentinel

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

SMALL = ["sft.steps=0", "trainer.progress=false", "model.preset=llama-tiny", "data.prompts_per_step=4",
         "data.group_size=4", "actor.mini_batch_size=16", "actor.micro_batch_size=8",
         "critic.mini_batch_size=16", "critic.micro_batch_size=8", "control.enabled=false",
         "trainer.logger=[console,jsonl]"]
RLDBG = str(Path(sys.executable).with_name("rldbg"))
NAN_TASK = "data.task=nan_reward_task:NanOnceDigitShift"   # tests/nan_reward_task.py


def _nan_at(step: int, rank: int) -> list[str]:
    return [NAN_TASK, f"data.task_args={{n_digits: 1, nan_step: {step}, nan_rank: {rank}}}"]


class Proto:   # a DataProto-like object: rldbg walks any `.tensors` mapping
    def __init__(self, **tensors):
        self.tensors = tensors


def test_find_names_the_first_non_finite_key_and_counts_it():
    ok = Proto(scores=torch.zeros(8), ids=torch.arange(8))
    assert sentinel.find(ok) is None
    assert sentinel.find({"a": [torch.ones(3)], "n": 3, "s": "x"}) is None
    bad = torch.zeros(4, 5)
    bad[1, 2], bad[3, 0] = float("nan"), float("-inf")
    assert sentinel.find(Proto(values=torch.ones(2), logp=bad)) == ("logp", 2, 20)
    assert sentinel.find({"m": {"inner": [torch.ones(1), bad]}}) == ("m.inner.1", 2, 20)
    assert sentinel.find(torch.tensor([1, 2])) is None       # integer tensors cannot hold NaN



def test_alarms_come_oldest_first_by_time_not_by_the_text_of_ts():
    """rldbg writes ts as exact "µs.ns" strings: as text "10.000" sorts before "9.500"."""
    def alarm(ts, step):
        return {"ph": "i", "s": "t", "name": sentinel.EVENT, "ts": ts,
                "args": {"role": "actor", "rank": 0, "method": "update_actor", "step": step, "key": "loss"}}
    from trace_of import trace_of
    t = trace_of([alarm("10.000", 2), {"ph": "i", "name": "other", "ts": "1.000"}, alarm("9.500", 1),
                  alarm(11.5, 3)])   # another writer's number beside rldbg's strings
    found = sentinel.alarms(t.instants)
    assert [a["step"] for a in found] == [1, 2, 3]

def test_modes_stop_warn_off(tmp_path, capsys):
    bad = Proto(scores=torch.tensor([0.0, float("nan")]))
    scope = sentinel.CallScope("reward", 1, "compute_scores", 3)
    try:
        sentinel.configure("stop", str(tmp_path))
        with pytest.raises(sentinel.NonFinite) as e:
            scope.returned(bad, (Proto(responses=torch.ones(2)),), {})
        line = str(e.value)
        assert "\n" not in line
        for part in ("reward rank 1", "compute_scores", "step 3", "'scores'", "1 of 2"):
            assert part in line, line
        saved = Path(e.value.saved)
        assert saved == (tmp_path / "3-reward-1-compute_scores").resolve()
        assert torch.isnan(torch.load(saved / "output.pt", weights_only=False).tensors["scores"]).sum() == 1
        assert "responses" in torch.load(saved / "inputs.pt", weights_only=False)["args"][0].tensors
        sentinel.configure("warn", str(tmp_path))
        assert scope.returned(bad) is bad
        assert "rldbg warning: non-finite output: reward rank 1" in capsys.readouterr().err
        sentinel.configure("off", str(tmp_path))
        assert scope.returned(bad) is bad
        assert capsys.readouterr().err == ""
        with pytest.raises(ValueError, match="accepted: stop, warn, off"):
            sentinel.configure("halt")
    finally:
        sentinel.configure(None)


def _train(tmp_path, *extra, steps=3):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_DASHBOARD_ADDRESS")}
    env["RLDBG_HOME"] = str(tmp_path / "home")
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "reference_trainer", "--preset", "demo", *SMALL,
                           f"trainer.total_steps={steps}", f"trainer.run_dir={run}", *extra],
                          capture_output=True, text=True, env=env, timeout=300)
    return proc, run


def _report(trace: Path) -> dict:
    out = subprocess.run([RLDBG, "report", str(trace), "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def test_reward_nan_stops_the_run_at_that_step_naming_the_rank(tmp_path):
    proc, run = _train(tmp_path, *_nan_at(step=1, rank=1))
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1, proc.stderr[-3000:]
    line = err[0]
    for part in ("reward rank 1 compute_scores at step 1", "'scores' has 1 of 8 NaN/Inf", str(run / "failures")):
        assert part in line, line
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    print(line)
    # stopped at step 1: step 0 was logged, step 1 was not
    steps = [json.loads(ln)["step"] for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0]

    shard = run / "failures" / "1-reward-1-compute_scores"
    assert sorted(p.name for p in shard.iterdir()) == ["info.json", "inputs.pt", "output.pt"]
    out = torch.load(shard / "output.pt", weights_only=False)
    assert int(torch.isnan(out.tensors["scores"]).sum()) == 1
    inputs = torch.load(shard / "inputs.pt", weights_only=False)
    assert inputs["args"][0].tensors["responses"].shape[0] == 8   # rank 1's half of 16 samples
    assert not list((run / "failures").glob("*-reward-0-*")), "rank 0 was healthy"

    from trace_of import load_events

    from rldbg.trace.report import read_trace

    events = load_events(str(run / "trace.json.gz"))
    alarms = sentinel.alarms(read_trace(str(run / "trace.json.gz")).instants)
    assert [(a["role"], a["rank"], a["method"], a["step"], a["key"], a["count"]) for a in alarms] == \
        [("reward", 1, "compute_scores", 1, "scores", 1)]
    (inst,) = [e for e in events if e.get("ph") in ("i", "I") and e.get("name") == sentinel.EVENT]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert names[inst["pid"]] == "reward" and inst["tid"] == 2, (names[inst["pid"]], inst["tid"])  # rank 1's track

    rep = _report(run / "trace.json.gz")
    assert [(a["role"], a["rank"], a["step"]) for a in rep["nonfinite"]] == [("reward", 1, 1)]
    text = subprocess.run([RLDBG, "report", str(run / "trace.json.gz")], capture_output=True, text=True,
                          timeout=120).stdout
    assert "non-finite output: reward rank 1 compute_scores at step 1" in text

    from rldbg.tui.model import EventStore, role_rows
    from rldbg.store.chrome_import import ts_ns

    store = EventStore()   # the TUI's model fed the recorded alarm as the live stream carries it
    store.add([{"ph": "i", "cat": "user", "name": inst["name"], "ts_ns": ts_ns(inst["ts"]),
                "role": "reward", "rank": 1, "args": inst["args"]}])
    assert any("non-finite output: reward rank 1 compute_scores at step 1" in n[2] for n in store.notes)
    actors = [{"actor_id": "a1", "state": "ALIVE", "repr_name": "actor+reward[rank 1/2]", "pid": 1},
              {"actor_id": "a0", "state": "ALIVE", "repr_name": "actor+reward[rank 0/2]", "pid": 2}]
    states = {(r.role, r.rank): r.state for r in role_rows(actors, store, None, {}, set())}
    assert states[("reward", 1)] == "idle, NaN/Inf in compute_scores step 1"
    assert states[("reward", 0)] == "idle" and states[("actor", 1)] == "idle"


def test_healthy_run_raises_no_alarm(tmp_path):
    proc, run = _train(tmp_path, steps=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "non-finite" not in proc.stderr + proc.stdout
    assert not (run / "failures").exists()
    assert _report(run / "trace.json.gz")["nonfinite"] == []


def test_warn_mode_goes_on_and_a_later_exception_saves_its_shard(tmp_path):
    """warn: the NaN reward is reported and training goes on; the NaN reaches the weights and
    the next rollout raises on the actor (the failure a user meets, with its shard on disk)."""
    proc, run = _train(tmp_path, *_nan_at(step=0, rank=0), "debug.on_nonfinite=warn", steps=3)
    assert "rldbg warning: non-finite output: reward rank 0 compute_scores at step 0" in proc.stderr
    assert (run / "failures" / "0-reward-0-compute_scores" / "output.pt").exists()
    assert proc.returncode != 0, proc.stderr[-3000:]
    failed = sorted((run / "failures").glob("1-actor-*-generate_sequences"))
    assert failed, sorted(p.name for p in (run / "failures").iterdir())
    assert "probability tensor contains" in (failed[0] / "error.txt").read_text()
    assert (failed[0] / "inputs.pt").exists()
    assert f"inputs and error saved to {failed[0]}" in proc.stderr
    # the rank's traceback and one line last; not the driver's path to the call (runpy, fit, the group)
    last = proc.stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"error: actor rank [01] failed in generate_sequences at step 1: RuntimeError: probability "
                        r"tensor contains .*\[inputs and error saved to .*\]", last), proc.stderr[-3000:]
    assert "'s traceback:\nTraceback (most recent call last):" in proc.stderr and "runpy" not in proc.stderr


def test_the_product_config_has_no_test_only_key(tmp_path):
    """Faults are injected from the test side (above); a user's config shows only what users set."""
    proc = subprocess.run([sys.executable, "-m", "reference_trainer", "--preset", "demo",
                           f"trainer.run_dir={tmp_path}", "debug.test_nan_reward_step=1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("config error: unknown config key 'debug.test_nan_reward_step'; "
                                  "known keys under debug: "), proc.stderr
    import dataclasses

    from reference_trainer.config import Config

    def keys(node, prefix=""):
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            yield from keys(value, f"{prefix}{f.name}.") if dataclasses.is_dataclass(value) else [prefix + f.name]

    every = list(keys(Config()))
    assert len(every) > 50 and "debug.on_nonfinite" in every
    assert [k for k in every if any(w in k.lower() for w in ("test", "fault", "inject", "fake"))] == []


def test_a_task_of_the_users_own_is_named_module_colon_class(tmp_path):
    from reference_trainer.config import ConfigError, load_config
    cfg = load_config("demo", overrides=[NAN_TASK, "data.task_args={n_digits: 2, nan_step: 3}"])
    assert cfg.data.task == "nan_reward_task:NanOnceDigitShift"
    cases = {"data.task=no_such_module_here:Task": "cannot import 'no_such_module_here'",
             "data.task=nan_reward_task:Missing": "nan_reward_task.Missing is nothing, not a Task subclass",
             "data.task=sudoku": "unknown task 'sudoku'; accepted: a built-in task (count_up, digit_shift) or MODULE:CLASS"}
    for override, message in cases.items():
        with pytest.raises(ConfigError) as e:
            load_config("demo", overrides=[override])
        assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) \['nan_stp'\] for task"):
        load_config("demo", overrides=[NAN_TASK, "data.task_args={nan_stp: 3}"])
