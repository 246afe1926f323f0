"""The flight recorder (trace.window=N) and step windows (trace.steps), as users run them: the trainer
as a subprocess, `rldbg dump` from a second process, real signals, faults injected from the test
side (tests/faults, tests/nan_reward_task.py). Nothing is written while all is well; a trigger
writes RUN/flight-<step>-<reason>.json.gz, whose report says first what triggered it and which
steps it covers."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from polling import until

pytestmark = pytest.mark.slow   # end to end, as users run it: the last tier (tests/conftest.py)

TESTS = Path(__file__).parent
FAULTS = str(TESTS / "faults")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}   # its own embedded cluster
    env.update(extra)
    return env


def _trainer(run: Path, *overrides: str, env: dict | None = None, **popen) -> list:
    return [sys.executable, "-m", "reference_trainer", "--preset", "demo", f"trainer.run_dir={run}",
            "trainer.progress=false", "control.enabled=false", "resources.ray_num_cpus=2", *overrides]


def _report(path: Path, *flags: str) -> str:
    out = subprocess.run([sys.executable, "-m", "rldbg", "report", *flags, str(path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _steps_done(run: Path) -> int:
    try:
        return sum(1 for _ in open(run / "metrics.jsonl"))
    except OSError:
        return 0


def _written(run: Path) -> list:
    """The traces written, each checked to have its store beside it (rldbg.store)."""
    names = sorted(p.name for p in run.iterdir() if p.name.startswith(("flight-", "trace")))
    traces = [n for n in names if n.endswith(".json.gz")]
    assert names == sorted(traces + [n[:-len(".json.gz")] + ".rldbg.db" for n in traces]), names
    return traces


def _first_step(ring) -> int | None:
    return next((s for s, *_ in ring.events if s is not None), None)


def test_a_nan_writes_the_last_window_and_its_report_names_the_output_first(tmp_path):
    run = tmp_path / "nan"
    proc = subprocess.run(_trainer(run, "trace.window=5", "trainer.total_steps=40",
                                   "data.task=nan_reward_task:NanOnceDigitShift",
                                   "data.task_args={n_digits: 1, nan_step: 12, nan_rank: 1}"),
                          capture_output=True, text=True, timeout=600, env=_env(PYTHONPATH=str(TESTS)))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert _written(run) == ["flight-12-nonfinite.json.gz"], _written(run)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("flight recorder: nonfinite"))
    took = float(line.rsplit(", ", 1)[1].split(" s after")[0])
    assert took <= 10, line
    text = _report(run / "flight-12-nonfinite.json.gz").splitlines()
    assert text[1].startswith("flight recorder dump: nonfinite at step 12 (reward rank 1)"), text[:4]
    assert text[2] == "covers steps 8-12: the flight recorder's last 5 steps (trace.window)", text[:4]
    assert text[3] == "non-finite values:" and "reward rank 1 compute_scores at step 12" in text[4], text[:6]


def test_rldbg_dump_from_a_second_process_while_the_run_goes_on_then_sigterm_writes_one_too(ray_cluster, tmp_path):
    """The run uses the session's cluster, as a job on a cluster a user reaches with --address."""
    import ray

    from conftest import ray_cli_env
    gcs = ray.get_runtime_context().gcs_address
    run = tmp_path / "live"
    env = ray_cli_env(RAY_ADDRESS=gcs)
    proc = subprocess.Popen(_trainer(run, "trace.window=4", "trainer.total_steps=2000"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        until(lambda: _steps_done(run) >= 8, "8 steps", limit=240)
        assert _written(run) == [], "the flight recorder wrote something before any trigger"
        dump = subprocess.run([sys.executable, "-m", "rldbg", "dump", "--address", gcs], capture_output=True,
                              text=True, timeout=120, env=ray_cli_env())
        assert dump.returncode == 0, dump.stdout + dump.stderr
        assert dump.stdout.startswith(f"wrote {run}/flight-") and "-manual.json.gz" in dump.stdout, dump.stdout
        manual = Path(dump.stdout.split()[1])
        again = subprocess.run([sys.executable, "-m", "rldbg", "dump", "--address", gcs], capture_output=True,
                               text=True, timeout=120, env=ray_cli_env())   # within 30 s: no new dump, and said
        assert again.returncode == 0 and again.stdout.startswith(f"the latest dump is {manual} "), again.stdout
        assert again.stderr.startswith("rldbg dump: no new dump: a manual dump was taken moments ago"), again.stderr
        at = _steps_done(run)
        until(lambda: _steps_done(run) >= at + 3, "the run going on after the dump", limit=120)
        assert proc.poll() is None
        text = _report(manual).splitlines()
        assert text[1].startswith("flight recorder dump: manual at step "), text[:3]
        first, last = (int(x) for x in text[2].split()[2].rstrip(":").split("-"))
        assert last - first == 3 and last >= 7, text[2]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:]
    sigterm = [n for n in _written(run) if n.endswith("-SIGTERM.json.gz")]
    assert len(sigterm) == 1 and len(_written(run)) == 2, _written(run)
    assert "flight recorder: SIGTERM at step" in out and "; trace at" not in out, out[-2000:]
    assert _report(run / sigterm[0]).splitlines()[1].startswith("flight recorder dump: SIGTERM at step")


def test_a_hung_rank_dumps_every_ranks_stack_in_the_call(tmp_path):
    run = tmp_path / "hang"
    proc = subprocess.run(_trainer(run, "trace.window=4", "trace.hang_s=3", "trainer.total_steps=8"),
                          capture_output=True, text=True, timeout=600,
                          env=_env(PYTHONPATH=FAULTS, TEST_FAULT="update_hangs", TEST_FAULT_RANKS="1",
                                   TEST_FAULT_STEP="5", TEST_FAULT_HANG_S="12"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _written(run) == ["flight-5-hang.json.gz"], _written(run)
    r = json.loads(_report(run / "flight-5-hang.json.gz", "--json"))["recorded"]
    assert r["trigger"]["reason"] == "hang" and r["trigger"]["method"] == "update_actor"
    assert r["trigger"]["waiting_on"] == [0, 1] and r["steps"] == [[2, 5]]
    main = {(s["role"], s["rank"]): s["stack"] for s in r["stacks"] if s["thread"] == "main"}
    assert set(main) == {("driver", 0), ("actor", 0), ("actor", 1)}, sorted(main)
    assert "in update_actor" in main[("actor", 1)] and "time.sleep" in main[("actor", 1)]   # the hung rank
    assert "in all_reduce" in main[("actor", 0)]          # its peer, waiting for it in the collective
    assert "in get" in main[("driver", 0)]                # the driver, waiting for the call


def test_step_windows_record_only_the_steps_asked_for(tmp_path):
    run = tmp_path / "steps"
    proc = subprocess.run(_trainer(run, "trace.steps=[3-5]", "trainer.total_steps=8"), capture_output=True,
                          text=True, timeout=600, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = _report(run / "trace.json.gz").splitlines()
    assert text[1] == "covers steps 3-5: recorded only steps 3-5 (trace.steps)", text[:3]
    r = json.loads(_report(run / "trace.json.gz", "--json"))
    assert r["time"]["steps"] == 3 and r["recorded"]["steps"] == [[3, 5]]
    # The window opens with the memory and ledger state at its start: the ledger reads right.
    from rldbg.trace.report import read_trace
    t = read_trace(str(run / "trace.json.gz"))
    first_call = min(c["ts"] for c in t.calls if (c["role"], c["rank"]) == ("actor", 0))   # that process's window
    times, params = t.ledger[("actor", 0, "params")]
    assert params and times[0] <= first_call and params[0] > 0


@pytest.mark.parametrize("bad, says", [("trace.window=-1", "'trace.window' must be ≥ 0"),
                                       ("trace.steps=[5-3]", "'5-3' is not a step or a range"),
                                       ("trace.steps=[x]", "'x' is not a step or a range")])
def test_bad_window_or_steps_are_one_line_before_anything_starts(bad, says, tmp_path):
    out = subprocess.run(_trainer(tmp_path, bad), capture_output=True, text=True, timeout=120, env=_env())
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert says in out.stderr, out.stderr


def test_window_and_steps_together_are_refused(tmp_path):
    out = subprocess.run(_trainer(tmp_path, "trace.window=5", "trace.steps=[3-5]"), capture_output=True,
                         text=True, timeout=120, env=_env())
    assert out.returncode == 2 and "choose one" in out.stderr, out.stderr
    assert out.stderr.startswith("config error: config keys 'trace.window'=5 and"), out.stderr   # no doubled prefix


def test_the_ring_stays_bounded_and_keeps_the_state_at_its_start():
    from rldbg.trace.events import instant_event, ledger_event, memory_event
    from rldbg.trace.spill import pack_event
    from rldbg.trace.window import Ring

    ring = Ring(3, capacity=10_000)
    t = 0
    for step in range(200):   # a step a second
        evs = [ledger_event(t, "actor", 0, step, "m", "optimizer", 1000 + step),
               memory_event(t + 1, "actor", 0, None, None, {"rss": 5000 + step}),
               instant_event("user", "x", t + 2, "actor", 0, step, "m")]
        ring.add([pack_event(e) for e in evs])
        t += 1_000_000_000
    # It holds twice the window (processes answer a dump a heartbeat apart), never more.
    assert len(ring.events) == 2 * 3 * 3 and _first_step(ring) == 194 and ring.newest == 199
    window = ring.window()
    steps = {e[7] for e in window[2:] if e[7] is not None}
    assert steps == {197, 198, 199}
    # the state just before the window: the ledger and RSS of step 196, stamped at its start
    assert {tuple(e[10].items())[0] for e in window[:2]} == {("optimizer", 1196), ("rss", 5196)}
    assert window[0][3] == window[1][3] == window[2][3]
    # a dump of step 198 (a process a round ahead of the trigger) cuts the same steps as the others
    assert {e[7] for e in ring.window(198)[2:] if e[7] is not None} == {196, 197, 198}
    # events from before the first step belong to a window that reaches step 1 only
    early = Ring(3, capacity=100)
    early.add([pack_event(instant_event("user", "before", 0, "actor", 0, None, "m"))])
    early.add([pack_event(instant_event("user", "x", 1 + s, "actor", 0, s, "m")) for s in (1, 2, 3, 4)])
    assert [e[2] for e in early.window(3)] == ["before", "x", "x", "x"]
    assert [e[7] for e in early.window(4)] == [2, 3, 4]
    # a process a step behind the trigger ships the steps it has of the same window, no older one
    assert {e[7] for e in ring.window(200)[2:] if e[7] is not None} == {198, 199}


def test_the_ring_keeps_its_last_seconds_of_fast_steps_and_files_a_stepless_process_under_the_jobs_step():
    from rldbg.trace.events import instant_event, memory_event
    from rldbg.trace.spill import pack_event
    from rldbg.trace.window import MARGIN_NS, Ring

    # Steps of 50 ms: a process told of a dump a heartbeat later is many steps on, and must still
    # hold the steps that end at the dump's; it keeps the last MARGIN_NS, and no more.
    ring, t = Ring(3, capacity=10_000), 0
    for step in range(1000):
        ring.add([pack_event(instant_event("user", "x", t, "actor", 0, step, "m"))])
        t += 50_000_000
    assert len(ring.events) == MARGIN_NS // 50_000_000 + 1 and ring.newest == 999
    assert {e[7] for e in ring.window(950)} == {948, 949, 950}
    # The Ray driver under VeRL's TaskRunner records memory samples only: the collector's answers
    # give it the job's step, and its ring stays as bounded as a worker's.
    driver, t = Ring(3, capacity=10_000), 0
    for step in range(1, 301):
        driver.job_step = step
        driver.add([pack_event(memory_event(t + i * 100_000_000, "driver", 0, None, None, {"rss": 7000 + step}))
                    for i in range(10)])
        t += 1_000_000_000
    assert driver.newest == 300 and _first_step(driver) >= 295 and len(driver.events) <= 60
    cut = driver.window(299)
    assert {e[10]["rss"] for e in cut[1:]} == {7297, 7298, 7299} and cut[0][10]["rss"] == 7296


def test_a_dump_is_refused_in_one_line_when_the_trace_keeps_no_window(ray_cluster, tmp_path):
    import rldbg.trace

    rldbg.trace.start(str(tmp_path / "t.json"), memory_hz=0)
    try:
        with pytest.raises(ValueError, match="there is no window to dump"):
            rldbg.trace.dump()
    finally:
        rldbg.trace.stop(export=False)
