"""The flight recorder on VeRL as main_ppo runs it (the controller a TaskRunner actor,
tests/verl_taskrunner_program.py, no rldbg in it), switched on the way a VeRL user does:
RLDBG_VERL=1 RLDBG_TRACE=PATH RLDBG_TRACE_WINDOW=N. Nothing is written while the run goes on;
`rldbg dump` from a second process writes the last N steps of every process, the run goes on and
ends normally, and the dump's report says what triggered it and which steps it covers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
from verl_support import program_env, require_entry_point
from polling import until

from conftest import ray_cli_env

TESTS = Path(__file__).parent
PORT = int(os.environ.get("RLDBG_TEST_DASHBOARD_PORT", "8270")) + 4   # the program's own cluster
WINDOW, STEPS = 3, 400
WAIT_S = 240   # liveness bound (this machine may be busy), not a timing assertion


def _gcs_address(driver: psutil.Process) -> str | None:
    """The GCS of the cluster the program started: ray.init started the raylet as its child, and
    the raylet is told the GCS's address (the GCS itself was given port 0 and picked one)."""
    for p in driver.children(recursive=True):
        try:
            for a in p.cmdline():
                if a.startswith("--gcs-address="):
                    return a.split("=", 1)[1]
        except psutil.Error:
            continue
    return None


def _written(run: Path) -> list:
    """The traces written, each checked to have its store beside it (rldbg.store)."""
    names = sorted(p.name for p in run.iterdir() if p.name.startswith(("flight-", "trace")))
    traces = [n for n in names if n.endswith(".json.gz")]
    assert names == sorted(traces + [n[:-len(".json.gz")] + ".rldbg.db" for n in traces]), names
    return traces


def _calls_done(home: Path) -> int:
    top = subprocess.run([sys.executable, "-m", "rldbg", "top", "--once", "--address", f"http://127.0.0.1:{PORT}"],
                         capture_output=True, text=True, timeout=120, env=ray_cli_env(RLDBG_HOME=str(home)))
    done = top.stdout.split("calls done ", 1)[1].split()[0] if "calls done " in top.stdout else "None"
    return int(done) if done.isdigit() else 0


def _dump(gcs: str):
    return subprocess.run([sys.executable, "-m", "rldbg", "dump", "--address", gcs], capture_output=True, text=True,
                          timeout=120, env=ray_cli_env())


def test_rldbg_dump_writes_the_taskrunners_last_window_and_the_run_goes_on(tmp_path):
    require_entry_point()
    run = tmp_path / "run"
    run.mkdir()
    env = program_env(RLDBG_VERL=1, RLDBG_TRACE=run / "trace.json.gz", RLDBG_TRACE_WINDOW=WINDOW,
                      RLDBG_HOME=tmp_path / "home", STEPS=STEPS, THINK_S=0.05, DASHBOARD_PORT=PORT)
    prog = subprocess.Popen([sys.executable, str(TESTS / "verl_taskrunner_program.py")], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    try:
        driver = psutil.Process(prog.pid)
        gcs = until(lambda: _gcs_address(driver), "the program's Ray cluster", limit=WAIT_S, interval=0.5)
        # Watched from a second terminal until the window is full (two worker-group calls a step).
        until(lambda: _calls_done(tmp_path / "home") >= 2 * (WINDOW + 2), f"{WINDOW + 2} steps", limit=WAIT_S,
              interval=1)
        assert _written(run) == [], "the flight recorder wrote something before any trigger"
        dump = _dump(gcs)
        assert dump.returncode == 0, dump.stdout + dump.stderr
        assert dump.stdout.startswith(f"wrote {run}/flight-") and "-manual.json.gz" in dump.stdout, dump.stdout
        assert prog.poll() is None, "the run did not go on after the dump"
        out, _ = prog.communicate(timeout=WAIT_S * 2)
    finally:
        if prog.poll() is None:
            prog.kill()
            prog.communicate()
    assert prog.returncode == 0, out[-3000:]
    assert f"step {STEPS}:" in out, out[-3000:]
    manual = Path(dump.stdout.split()[1])
    assert _written(run) == [manual.name], _written(run)   # one trace: the dump; the run's end writes nothing

    r = subprocess.run([sys.executable, "-m", "rldbg", "report", str(manual)], capture_output=True, text=True,
                       env=program_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    text = r.stdout.splitlines()
    at = int(manual.name.split("-")[1])
    assert text[1].startswith(f"flight recorder dump: manual at step {at}"), text[:4]
    assert text[2] == f"covers steps {at - WINDOW + 1}-{at}: the flight recorder's last {WINDOW} steps (trace.window)", \
        text[:4]
    rep = json.loads(subprocess.run([sys.executable, "-m", "rldbg", "report", "--json", str(manual)],
                                    capture_output=True, text=True, env=program_env(), timeout=120).stdout)
    roles = sorted((x["role"], x["rank"]) for x in rep["ranks"])
    assert roles == [("actor", 0), ("actor", 1), ("critic", 0), ("critic", 1), ("driver", 0)], roles
    # Every rank's calls of each covered step are there, and the TaskRunner's calls that made them.
    # A manual dump lands at any moment of the newest step: what it holds of that step is whatever
    # each process had finished (a rank's span ends before its result reaches the TaskRunner, which
    # records the call when it collects it), so the newest step is checked for nothing foreign only.
    from rldbg.trace.report import analyse_trace
    _, t = analyse_trace(str(manual))
    done = range(at - WINDOW + 1, at)
    calls = sorted((c["role"], c["rank"], c["step"]) for c in t.calls)
    every = [(role, rank, s) for role in ("actor", "critic") for rank in (0, 1) for s in (*done, at)]
    assert [c for c in calls if c[2] != at] == sorted(c for c in every if c[2] != at), calls
    assert set(calls) <= set(every), calls
    made = sorted((d["step"], d["method"]) for d in t.driver_calls if d["name"] == d["method"])
    assert [m for m in made if m[0] != at] == sorted((s, m) for s in done for m in ("update_actor", "compute_values")), \
        made
    assert {m for m in made if m[0] == at} <= {(at, "update_actor"), (at, "compute_values")}, made
